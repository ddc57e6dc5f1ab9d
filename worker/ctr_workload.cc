#include "worker/ctr_workload.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/ctr_model_options.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "common/table_spec.h"
#include "data/ctr_files.h"
#include "data/text_records.h"

namespace pstrain::worker {

absl::StatusOr<std::unique_ptr<CtrWorkload>> CtrWorkload::Create(const JobSpec& job, const ClusterView& view,
                                                                 model::Backend* backend) {
  const model::CtrModelOptions options = CtrModelOptionsOf(job);
  ASSIGN_OR_RETURN(std::unique_ptr<model::CtrModel> model, model::CtrModel::Create(options, backend));
  ASSIGN_OR_RETURN(const data::DataFormat format, data::ParseDataFormat(job.data().format()));
  ASSIGN_OR_RETURN(const data::BadRecords bad_records, data::ParseBadRecords(job.data().bad_records()));
  data::CtrSource::Options source;
  source.format = format;
  source.bad_records = bad_records;
  if (IsStreamJob(job)) {
    return std::unique_ptr<CtrWorkload>(new CtrWorkload(
        std::move(model), nullptr, nullptr, std::make_unique<StreamReader>(job.data().stream_dir(), source)));
  }
  ASSIGN_OR_RETURN(const data::CtrFiles files, data::FindCtrFiles(job.data().data_dir(), format));
  ASSIGN_OR_RETURN(std::unique_ptr<data::CtrSource> train, data::CtrSource::Open(files.train, source));
  ASSIGN_OR_RETURN(std::unique_ptr<data::CtrSource> test, data::CtrSource::Open(files.test, source));
  return std::unique_ptr<CtrWorkload>(new CtrWorkload(std::move(model), std::move(train), std::move(test), nullptr));
}

CtrWorkload::CtrWorkload(std::unique_ptr<model::CtrModel> model, std::unique_ptr<data::CtrSource> train,
                         std::unique_ptr<data::CtrSource> test, std::unique_ptr<StreamReader> stream)
    : model_(std::move(model)), train_(std::move(train)), test_(std::move(test)), stream_(std::move(stream)) {}

absl::Status CtrWorkload::SetParameters(absl::Span<const float> weights) { return model_->SetParameters(weights); }

absl::Status CtrWorkload::LoadBatch(absl::Span<const int64_t> samples) {
  const int64_t first = samples.empty() ? 0 : samples.front();
  if (!samples.empty() && samples.back() - first + 1 != static_cast<int64_t>(samples.size())) {
    return absl::InternalError(absl::StrCat("ctr batch of ", samples.size(), " samples from ", first, " to ",
                                            samples.back(), ": expected a contiguous run of records"));
  }
  const int64_t count = static_cast<int64_t>(samples.size());
  if (stream_ != nullptr) {
    if (view_ == nullptr) return absl::InternalError("ctr workload on a data stream: no view to follow (FollowView)");
    RETURN_IF_ERROR(stream_->Read(view_->stream(), first, count, &batch_));
  } else {
    RETURN_IF_ERROR(train_->ReadBatch(first, count, &batch_));
  }
  ASSIGN_OR_RETURN(keys_, model_->TableKeys(batch_));
  return absl::OkStatus();
}

absl::Status CtrWorkload::PullRows(TrainingSession* session, const std::vector<absl::Span<const uint64_t>>& keys) {
  RETURN_IF_ERROR(session->PullRows(keys));
  rows_.clear();
  row_grads_.clear();
  for (int t = 0; t < session->num_tables(); ++t) {
    rows_.push_back(session->rows(t));
    row_grads_.push_back(session->row_gradient(t));
  }
  return absl::OkStatus();
}

absl::Status CtrWorkload::ComputeGradient(TrainingSession* session, model::GradientSink* /*sink*/,
                                          model::BatchStats* stats) {
  RETURN_IF_ERROR(PullRows(session, keys_));
  const size_t before = stats->predictions.size();
  RETURN_IF_ERROR(model_->ComputeGradient(batch_, rows_, session->gradient(), row_grads_, stats));
  if (stream_ != nullptr && stats->predictions.size() > before) {
    // Progressive validation per file of the stream.
    for (const auto& run : stream_->last_files()) stats->prediction_files.push_back(run);
  }
  return absl::OkStatus();
}

absl::Status CtrWorkload::Evaluate(TrainingSession* session, int64_t begin, int64_t end, model::BatchStats* stats,
                                   data::ScoreHistogram* scores) {
  if (test_ == nullptr && end > begin) {
    return absl::FailedPreconditionError(absl::StrCat("ctr workload: test samples [", begin, ", ", end,
                                                      ") asked of a job on a data stream, which has none"));
  }
  for (int64_t first = begin; first < end; first += kEvalPiece) {
    const int64_t count = std::min(kEvalPiece, end - first);
    RETURN_IF_ERROR(test_->ReadBatch(first, count, &batch_));
    ASSIGN_OR_RETURN(const std::vector<absl::Span<const uint64_t>> keys, model_->TableKeys(batch_));
    RETURN_IF_ERROR(PullRows(session, keys));
    probabilities_.resize(batch_.size);
    RETURN_IF_ERROR(model_->Predict(batch_, rows_, absl::MakeSpan(probabilities_)));
    data::PredictionTotals totals;
    RETURN_IF_ERROR(data::ScorePredictions(probabilities_, batch_.labels, scores, &totals));
    stats->loss_sum += totals.log_loss_sum;
    stats->correct += totals.correct;
    stats->samples += batch_.size;
    stats->skipped += count - batch_.size;
  }
  return absl::OkStatus();
}

}  // namespace pstrain::worker
