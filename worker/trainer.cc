#include "worker/trainer.h"

#include <optional>

#include "common/status_macros.h"

namespace pstrain::worker {

absl::Status Trainer::SyncModel() {
  if (session_->weights_version() == loaded_version_) return absl::OkStatus();
  RETURN_IF_ERROR(workload_->SetParameters(session_->weights()));
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
        std::optional<data::ScoreHistogram> scores;
        if (workload_->ScoresPredictions()) scores.emplace();
        RETURN_IF_ERROR(
            workload_->Evaluate(session_.get(), work.begin, work.end, &stats, scores.has_value() ? &*scores : nullptr));
        RETURN_IF_ERROR(session_->ReportEvaluation(stats, scores.has_value() ? &*scores : nullptr));
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
  RETURN_IF_ERROR(workload_->LoadBatch(work.samples));
  ASSIGN_OR_RETURN(model::GradientSink* const sink, session_->BeginStep());
  model::BatchStats stats;
  // Progressive validation: each trained sample's prediction before the update it leads to.
  stats.want_predictions = workload_->ScoresPredictions();
  absl::Status computed = workload_->ComputeGradient(session_.get(), sink, &stats);
  if (!computed.ok()) {
    session_->AbandonStep();
    return computed;
  }
  // kRecompute: the next Next() hands out what to compute instead.
  return session_->EndStep(stats).status();
}

}  // namespace pstrain::worker
