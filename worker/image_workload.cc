#include "worker/image_workload.h"

#include "absl/strings/str_cat.h"
#include "data/batch.h"

namespace pstrain::worker {

absl::StatusOr<std::unique_ptr<ImageWorkload>> ImageWorkload::Create(model::Model* model, const data::Dataset* train,
                                                                     const data::Dataset* test, const ClusterView& view,
                                                                     int64_t largest_batch) {
  if (train->features() != model->input_size() || test->features() != model->input_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data has ", train->features(), " features per sample, the model expects ", model->input_size()));
  }
  if (train->num_samples != view.train_samples() || test->num_samples != view.test_samples()) {
    return absl::InvalidArgumentError(absl::StrCat("data has ", train->num_samples, " training and ", test->num_samples,
                                                   " test samples, the job has ", view.train_samples(), " and ",
                                                   view.test_samples()));
  }
  return std::unique_ptr<ImageWorkload>(new ImageWorkload(model, train, test, largest_batch));
}

ImageWorkload::ImageWorkload(model::Model* model, const data::Dataset* train, const data::Dataset* test,
                             int64_t largest_batch)
    : model_(model), train_(train), test_(test) {
  batch_x_.resize(static_cast<size_t>(largest_batch) * train_->features());
  batch_y_.resize(largest_batch);
}

absl::Status ImageWorkload::SetParameters(absl::Span<const float> weights) { return model_->SetParameters(weights); }

absl::Status ImageWorkload::LoadBatch(absl::Span<const int64_t> samples) {
  count_ = static_cast<int>(samples.size());
  if (count_ > static_cast<int64_t>(batch_y_.size())) {
    batch_x_.resize(static_cast<size_t>(count_) * train_->features());
    batch_y_.resize(count_);
  }
  data::GatherBatch(*train_, samples, batch_x_.data(), batch_y_.data());
  return absl::OkStatus();
}

absl::Status ImageWorkload::ComputeGradient(TrainingSession* session, model::GradientSink* sink,
                                            model::BatchStats* stats) {
  return model_->ComputeGradient(batch_x_.data(), batch_y_.data(), count_, session->gradient(), stats, sink);
}

absl::Status ImageWorkload::Evaluate(TrainingSession* /*session*/, int64_t begin, int64_t end, model::BatchStats* stats,
                                     data::ScoreHistogram* /*scores*/) {
  return model_->Evaluate(test_->images.data() + begin * test_->features(), test_->labels.data() + begin,
                          static_cast<int>(end - begin), stats);
}

}  // namespace pstrain::worker
