#include "worker/trainer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/batch.h"

namespace pstrain::worker {

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(std::unique_ptr<TrainingSession> session,
                                                        model::Model* model, const data::Dataset* train,
                                                        const data::Dataset* test) {
  if (train->features() != model->input_size() || test->features() != model->input_size()) {
    return absl::InvalidArgumentError(absl::StrCat("data has ", train->features(),
                                                   " features per sample, the model expects ",
                                                   model->input_size()));
  }
  const ClusterView& view = session->view();
  if (train->num_samples != view.train_samples() || test->num_samples != view.test_samples()) {
    return absl::InvalidArgumentError(absl::StrCat("data has ", train->num_samples, " training and ",
                                                   test->num_samples, " test samples, the job has ",
                                                   view.train_samples(), " and ", view.test_samples()));
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(session), model, train, test));
}

Trainer::Trainer(std::unique_ptr<TrainingSession> session, model::Model* model, const data::Dataset* train,
                 const data::Dataset* test)
    : session_(std::move(session)), model_(model), train_(train), test_(test) {
  // A sync slice grows when workers leave (the global batch is shared by fewer); at most the
  // whole global batch.
  const int64_t largest = std::max<int64_t>(session_->job().batch_size(), session_->view().global_batch());
  batch_x_.resize(static_cast<size_t>(largest) * train_->features());
  batch_y_.resize(largest);
}

absl::Status Trainer::SyncModel() {
  if (session_->weights_version() == loaded_version_) return absl::OkStatus();
  RETURN_IF_ERROR(model_->SetParameters(session_->weights()));
  loaded_version_ = session_->weights_version();
  return absl::OkStatus();
}

absl::Status Trainer::Run() {
  TrainingSession::Work work;
  while (true) {
    RETURN_IF_ERROR(session_->Next(&work));
    switch (work.kind) {
      case TrainingSession::Work::kTrain:
        RETURN_IF_ERROR(Train(work));
        break;
      case TrainingSession::Work::kEvaluate: {
        RETURN_IF_ERROR(SyncModel());
        model::BatchStats stats;
        RETURN_IF_ERROR(model_->Evaluate(test_->images.data() + work.begin * test_->features(),
                                         test_->labels.data() + work.begin, static_cast<int>(work.end - work.begin),
                                         &stats));
        RETURN_IF_ERROR(session_->ReportEvaluation(stats));
        break;
      }
      case TrainingSession::Work::kDone:
        left_ = work.left;
        return SyncModel();
    }
  }
}

absl::Status Trainer::Train(const TrainingSession::Work& work) {
  RETURN_IF_ERROR(SyncModel());
  const int count = static_cast<int>(work.samples.size());
  if (count > static_cast<int64_t>(batch_y_.size())) {
    batch_x_.resize(static_cast<size_t>(count) * train_->features());
    batch_y_.resize(count);
  }
  data::GatherBatch(*train_, work.samples, batch_x_.data(), batch_y_.data());
  ASSIGN_OR_RETURN(model::GradientSink* const sink, session_->BeginStep());
  model::BatchStats stats;
  absl::Status computed =
      model_->ComputeGradient(batch_x_.data(), batch_y_.data(), count, session_->gradient(), &stats, sink);
  if (!computed.ok()) {
    session_->AbandonStep();
    return computed;
  }
  // kRecompute: the next Next() hands out what to compute instead.
  return session_->EndStep(stats).status();
}

}  // namespace pstrain::worker
