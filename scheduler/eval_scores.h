// The test AUC of one epoch (CTR models): the score histograms of its evaluation leases
// (EvalStats.scores), merged as the leases are reported, and once every lease is in, only the AUC
// and its error bound (data/score_histogram.h).
//
//   no scores --Add(lease with scores)--> merging --Finish (every lease in)--> finished: auc, bound
//
// The histogram is dropped when the epoch's evaluation is complete because it is 1 MiB in memory
// and up to ~0.5 MB in the saved state, which is written after every change; a finished epoch
// needs only its two numbers. Each lease's scores are added once: the EvalPool calls Add only
// for a lease's first results.
//
// The AUC is over the whole test set only if every lease came with scores; an epoch where some
// did and some did not (workers of different builds) gets NaN rather than the AUC of a part.
//
// Not thread-safe: the EvalPool that owns it is guarded by the Scheduler's mutex.
#ifndef PSTRAIN_SCHEDULER_EVAL_SCORES_H_
#define PSTRAIN_SCHEDULER_EVAL_SCORES_H_

#include <cstdint>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "data/score_histogram.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

class EvalScores {
 public:
  // Checks `eval.scores`, if set, against its lease: INVALID_ARGUMENT for a malformed histogram
  // (data::CheckScoreHistogramProto) or one that does not hold one prediction per sample
  // (eval.samples() in all). `where` (e.g. "evaluation report from worker 1 for lease 3") starts
  // the message.
  static absl::Status Check(const EvalStats& eval, absl::string_view where);

  // A lease's first results (REQUIRES: Check was OK): merges its scores, or counts it as a lease
  // without any. Ignored once finished.
  void Add(const EvalStats& eval);
  // Every lease of `epoch` is in: computes the AUC and drops the histogram. Later calls do nothing.
  void Finish(int epoch);

  // Whether some lease came with scores: the epoch has a test AUC once finished.
  bool any() const { return scored_ > 0; }
  bool finished() const { return finished_; }
  // Once finished: the AUC over the merged histogram and its error bound. NaN when it is
  // undefined (only one label in the test set), when some lease came without scores, and before
  // Finish.
  double auc() const { return auc_; }
  double error_bound() const { return error_bound_; }

  // As a proto, and back (the EvalPool's snapshot). Restore: INVALID_ARGUMENT for a malformed
  // histogram, changing nothing.
  EvalScoresState ToProto() const;
  absl::Status Restore(const EvalScoresState& state);

 private:
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  int64_t scored_ = 0;    // leases added with scores
  int64_t unscored_ = 0;  // leases added without
  // The scored leases' histograms, merged; unset before the first and after Finish.
  std::optional<data::ScoreHistogram> merged_;
  bool finished_ = false;
  double auc_ = kNaN;
  double error_bound_ = kNaN;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_EVAL_SCORES_H_
