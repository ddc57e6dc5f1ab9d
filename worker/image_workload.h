// The built-in image classifiers (model/model.h: the MLP and the CNN) on in-memory data sets, as
// a Workload (worker/workload.h).
#ifndef PSTRAIN_WORKER_IMAGE_WORKLOAD_H_
#define PSTRAIN_WORKER_IMAGE_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "model/model.h"
#include "proto/cluster.pb.h"
#include "worker/workload.h"

namespace pstrain::worker {

class ImageWorkload : public Workload {
 public:
  // Everything borrowed must outlive the workload. INVALID_ARGUMENT when the data does not match
  // the model or the view's sample counts.
  static absl::StatusOr<std::unique_ptr<ImageWorkload>> Create(model::Model* model, const data::Dataset* train,
                                                               const data::Dataset* test, const ClusterView& view,
                                                               int64_t largest_batch);

  absl::Status SetParameters(absl::Span<const float> weights) override;
  absl::Status LoadBatch(absl::Span<const int64_t> samples) override;
  absl::Status ComputeGradient(TrainingSession* session, model::GradientSink* sink, model::BatchStats* stats) override;
  absl::Status Evaluate(TrainingSession* session, int64_t begin, int64_t end, model::BatchStats* stats,
                        data::ScoreHistogram* scores) override;

 private:
  ImageWorkload(model::Model* model, const data::Dataset* train, const data::Dataset* test, int64_t largest_batch);

  model::Model* const model_;
  const data::Dataset* const train_;
  const data::Dataset* const test_;
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_y_;
  int count_ = 0;  // samples loaded
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_IMAGE_WORKLOAD_H_
