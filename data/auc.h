// The exact area under the ROC curve of a set of scores, as the generator reports the planted
// model's test AUC and the trainer its final_test_auc.
//
// AUC = P(score of a random positive > score of a random negative) + 0.5 P(equal), computed
// exactly from ranks (Mann-Whitney U): sort the scores, give tied scores their average rank, and
//   AUC = (sum of the positives' ranks - P (P + 1) / 2) / (P N).
// O(n log n) time, one sorted copy (16 bytes per sample) of memory. Thread-compatible.
#ifndef PSTRAIN_DATA_AUC_H_
#define PSTRAIN_DATA_AUC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pstrain {
namespace data {

// `labels[i]` (0 or 1) is the label of `scores[i]`. INVALID_ARGUMENT if the sizes differ, a label
// is neither 0 nor 1, a score is NaN, or there is no positive or no negative (AUC is undefined).
absl::StatusOr<double> ExactAuc(absl::Span<const double> scores, absl::Span<const uint8_t> labels);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_AUC_H_
