// The training loop of pstrain-worker: a TrainingSession (worker/training_session.h) driven with a
// Workload (worker/workload.h), the same loop for every built-in model.
//
//   Next() -> kTrain:    LoadBatch, BeginStep, ComputeGradient into the session's buffers
//                        (reporting each layer to the session's sink while backward runs), EndStep
//          -> kEvaluate: Evaluate the test range, ReportEvaluation
//          -> kDone:     return
//
// The workload's model keeps its own copy of the dense weights (on its device), so the loop
// reloads it whenever the session has written new ones.
//
// Not thread-safe: Run() is called once, on one thread.
#ifndef PSTRAIN_WORKER_TRAINER_H_
#define PSTRAIN_WORKER_TRAINER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/training_session.h"
#include "worker/workload.h"

namespace pstrain::worker {

class Trainer {
 public:
  // `workload` computes what `session` was created for; borrowed, it must outlive the Trainer.
  Trainer(std::unique_ptr<TrainingSession> session, Workload* workload)
      : session_(std::move(session)), workload_(workload) {}

  // Trains the whole job (or until asked to leave) and sends the final report. Blocks. Errors name
  // the failing call.
  absl::Status Run();

  // The weights after Run() (the job's final model, unless the worker left early).
  absl::Span<const float> weights() const { return session_->weights(); }

  // True when Run() ended because the worker left the job.
  bool left() const { return left_; }

 private:
  // Loads the session's weights into the workload if they changed since the last load.
  absl::Status SyncModel();
  absl::Status Train(const TrainingSession::Work& work);

  const std::unique_ptr<TrainingSession> session_;
  Workload* const workload_;
  int64_t loaded_version_ = -1;
  bool left_ = false;
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_TRAINER_H_
