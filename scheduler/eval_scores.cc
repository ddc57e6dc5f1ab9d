#include "scheduler/eval_scores.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/score_histogram_proto.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {

absl::Status EvalScores::Check(const EvalStats& eval, absl::string_view where) {
  if (!eval.has_scores()) return absl::OkStatus();
  absl::StatusOr<int64_t> predictions = data::CheckScoreHistogramProto(eval.scores());
  if (!predictions.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", predictions.status().message()));
  }
  if (*predictions != eval.samples()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": score histogram holds ", *predictions,
                                                   " predictions, expected one per sample (", eval.samples(), ")"));
  }
  return absl::OkStatus();
}

void EvalScores::Add(const EvalStats& eval) {
  if (finished_) return;  // Only a state restored from a damaged file gets here.
  if (!eval.has_scores()) {
    ++unscored_;
    return;
  }
  if (!merged_.has_value()) merged_.emplace();
  const absl::Status merged = data::MergeScoreHistogramProto(eval.scores(), &*merged_);
  CHECK(merged.ok()) << "scores merged without EvalScores::Check: " << merged;
  ++scored_;
}

void EvalScores::Finish(int epoch) {
  if (finished_) return;
  finished_ = true;
  if (scored_ > 0 && unscored_ > 0) {
    LOG(WARNING) << "epoch " << epoch << ": " << unscored_ << " of " << scored_ + unscored_
                 << " evaluation leases came without scores; no test AUC for this epoch";
  } else if (merged_.has_value()) {
    auc_ = merged_->Auc().value_or(kNaN);
    error_bound_ = merged_->ErrorBound().value_or(kNaN);
  }
  merged_.reset();
}

EvalScoresState EvalScores::ToProto() const {
  EvalScoresState state;
  state.set_scored_leases(scored_);
  state.set_unscored_leases(unscored_);
  if (merged_.has_value()) *state.mutable_merged() = data::ScoreHistogramToProto(*merged_);
  state.set_finished(finished_);
  // NaN is left out: it never compares equal, and "none" needs no value.
  if (!std::isnan(auc_)) state.set_auc(auc_);
  if (!std::isnan(error_bound_)) state.set_auc_error_bound(error_bound_);
  return state;
}

absl::Status EvalScores::Restore(const EvalScoresState& state) {
  std::optional<data::ScoreHistogram> merged;
  if (state.has_merged()) {
    merged.emplace();
    if (absl::Status s = data::MergeScoreHistogramProto(state.merged(), &*merged); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("scheduler state, evaluation scores: ", s.message()));
    }
  }
  scored_ = state.scored_leases();
  unscored_ = state.unscored_leases();
  merged_ = std::move(merged);
  finished_ = state.finished();
  auc_ = finished_ && state.has_auc() ? state.auc() : kNaN;
  error_bound_ = finished_ && state.has_auc_error_bound() ? state.auc_error_bound() : kNaN;
  return absl::OkStatus();
}

}  // namespace scheduler
}  // namespace pstrain
