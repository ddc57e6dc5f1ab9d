// Predicted click probabilities counted by label in fixed bins: a summary of a test set's
// predictions that merges exactly across workers and gives the AUC of the whole set to within a
// bound it computes itself. Evaluation of a CTR model uses it because the AUC is not a sum over
// samples: each worker reports the histogram of its test range and the scheduler merges them.
//
// Bins. kNumBins bins of equal width on the logit scale, logit(p) = log(p / (1 - p)), over
// [-kMaxLogit, kMaxLogit]; the first and the last bin also take everything beyond (p below about
// 6e-6 or above 1 - 6e-6). Why the logit: CTR predictions crowd into a small corner of [0, 1]
// (most near 0.01-0.3, often spanning decades), and equal logit widths are equal relative
// widths in the odds, fine wherever the predictions are. A bin is 24 / 2^16 ~ 3.7e-4 wide in
// logit, a relative change of 0.037% in the odds; 2^16 bins are 1 MiB of counts.
//
// Which bin a probability falls in is decided by comparing it with the bins' lower edges, which
// are computed once (sigmoid(-kMaxLogit + b w)) and strictly increase; so BinOf is monotone: a
// higher probability never lands in a lower bin, whatever the rounding of log and exp.
//
// AUC. Auc() counts, over all (positive, negative) pairs, 1 when the positive's bin is higher, 0
// when it is lower, and 1/2 when they share a bin, divided by P N (P positives, N negatives).
// Error bound. Because BinOf is monotone, a pair in different bins is ordered by its bins exactly
// as by its probabilities, so it counts the same in Auc() and in the exact AUC (data/auc.h). Only
// the pos_b neg_b pairs that share bin b may differ: Auc() counts each 1/2, the exact AUC 0, 1/2
// or 1, so each is off by at most 1/2 and
//   |Auc() - exact AUC| <= ErrorBound() = 0.5 sum_b pos_b neg_b / (P N).
// The bound is reached when, in every bin, all positives score above (or all below) all negatives.
// For many predictions whose logits have smooth densities f+ (positives) and f- (negatives) it is
// about 0.5 w integral(f+ f-) (w: the bin width), whatever their number: 200k calibrated predictions with normal logits
// of standard deviation 1.5 give a bound near 3e-5 (6e-5 for 0.75), and are in fact off by about 1e-7, since the ties
// of a bin mostly split evenly.
//
// Thread-compatible; copyable (1 MiB).
#ifndef PSTRAIN_DATA_SCORE_HISTOGRAM_H_
#define PSTRAIN_DATA_SCORE_HISTOGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pstrain {
namespace data {

class ScoreHistogram {
 public:
  static constexpr int kNumBins = 1 << 16;
  static constexpr double kMaxLogit = 12;

  // Empty: no predictions.
  ScoreHistogram();

  // Counts one prediction of probability `probability` for a sample whose label is `positive`.
  // Probabilities below 0 or above 1 count as 0 or 1. INVALID_ARGUMENT, counting nothing, for NaN.
  absl::Status Add(double probability, bool positive);

  // Adds every prediction counted in `other`.
  void Merge(const ScoreHistogram& other);

  int64_t positives() const { return positives_; }
  int64_t negatives() const { return negatives_; }
  int64_t count() const { return positives_ + negatives_; }

  // The AUC over the bins (ties within a bin count 1/2; see the file comment), within
  // ErrorBound() of the exact AUC of the predictions counted. INVALID_ARGUMENT when there is no
  // positive or no negative: the AUC is undefined.
  absl::StatusOr<double> Auc() const;
  // 0.5 sum_b pos_b neg_b / (P N): |Auc() - exact AUC| never exceeds it. Errors as Auc().
  absl::StatusOr<double> ErrorBound() const;

  // The bin of `probability`, in [0, kNumBins). REQUIRES: not NaN.
  static int BinOf(double probability);
  // The smallest probability of bin `bin` (0 for bin 0). REQUIRES: 0 <= bin < kNumBins.
  static double LowerEdge(int bin);

  // The compact form: the non-empty bins, ascending, with their counts.
  void ForEachNonEmpty(absl::FunctionRef<void(uint32_t bin, int64_t positives, int64_t negatives)> fn) const;
  // Checks a compact form (bins[i] holds positives[i] and negatives[i]; bins in any order, a
  // repeated bin adds up): INVALID_ARGUMENT when the three lists differ in length, a bin is not
  // below kNumBins, or the counts add up past what an int64 holds. Otherwise the number of
  // predictions the lists hold.
  static absl::StatusOr<int64_t> CheckBins(absl::Span<const uint32_t> bins, absl::Span<const uint64_t> positives,
                                           absl::Span<const uint64_t> negatives);
  // Adds a compact form. Errors as CheckBins, counting nothing. REQUIRES: the totals after adding
  // fit an int64 (they do for any real test set).
  absl::Status AddBins(absl::Span<const uint32_t> bins, absl::Span<const uint64_t> positives,
                       absl::Span<const uint64_t> negatives);

 private:
  // Indexed by bin.
  std::vector<int64_t> positive_bins_;
  std::vector<int64_t> negative_bins_;
  int64_t positives_ = 0;
  int64_t negatives_ = 0;
};

// What a batch of click predictions scores besides the AUC: the sum of their log losses (each p
// kept within [1e-12, 1 - 1e-12], so a confident mistake costs a large but finite amount) and how
// many are right (p > 0.5 for a click).
struct PredictionTotals {
  double log_loss_sum = 0;
  int64_t correct = 0;
};

// The log loss of predicting click probability `p` for a sample that is a click or not, with p kept
// within [1e-12, 1 - 1e-12] as PredictionTotals says.
double LogLoss(float p, bool click);

// Adds prediction i (probabilities[i], a click when labels[i] > 0.5) to *scores and *totals.
// INVALID_ARGUMENT for spans of different lengths or a NaN prediction; the predictions before it
// are added then. Every evaluation of a CTR model scores its predictions this way.
absl::Status ScorePredictions(absl::Span<const float> probabilities, absl::Span<const float> labels,
                              ScoreHistogram* scores, PredictionTotals* totals);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_SCORE_HISTOGRAM_H_
