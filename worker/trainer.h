// The built-in models' training loop: a TrainingSession (worker/training_session.h) driven with a
// model::Model on an in-memory data set.
//
//   Next() -> kTrain:    gather the samples, compute the gradient into the session's buffer
//                        (reporting each layer to the session's sink while backward runs), EndStep
//          -> kEvaluate: evaluate the test range, ReportEvaluation
//          -> kDone:     return
//
// The model keeps its own copy of the weights (on its device), so the loop reloads it whenever
// the session has written new ones.
//
// Not thread-safe: Run() is called once, on one thread.
#ifndef PSTRAIN_WORKER_TRAINER_H_
#define PSTRAIN_WORKER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "model/model.h"
#include "worker/training_session.h"

namespace pstrain::worker {

class Trainer {
 public:
  // `session` was created for the model's params(). Everything borrowed must outlive the Trainer.
  // INVALID_ARGUMENT when the data set does not match the model or the job's sample counts.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(std::unique_ptr<TrainingSession> session,
                                                        model::Model* model, const data::Dataset* train,
                                                        const data::Dataset* test);

  // Trains the whole job (or until asked to leave) and sends the final report. Blocks. Errors name
  // the failing call.
  absl::Status Run();

  // The weights after Run() (the job's final model, unless the worker left early).
  absl::Span<const float> weights() const { return session_->weights(); }

  // True when Run() ended because the worker left the job.
  bool left() const { return left_; }

 private:
  Trainer(std::unique_ptr<TrainingSession> session, model::Model* model, const data::Dataset* train,
          const data::Dataset* test);

  // Loads the session's weights into the model if they changed since the last load.
  absl::Status SyncModel();
  absl::Status Train(const TrainingSession::Work& work);

  const std::unique_ptr<TrainingSession> session_;
  model::Model* const model_;
  const data::Dataset* const train_;
  const data::Dataset* const test_;
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_y_;
  int64_t loaded_version_ = -1;
  bool left_ = false;
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_TRAINER_H_
