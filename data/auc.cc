#include "data/auc.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace data {

absl::StatusOr<double> ExactAuc(absl::Span<const double> scores, absl::Span<const uint8_t> labels) {
  if (scores.size() != labels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AUC: ", scores.size(), " scores but ", labels.size(), " labels, expected as many"));
  }
  std::vector<std::pair<double, uint8_t>> sorted(scores.size());
  int64_t positives = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] > 1) {
      return absl::InvalidArgumentError(absl::StrCat("AUC: label ", labels[i], " at index ", i, ", expected 0 or 1"));
    }
    if (std::isnan(scores[i])) {
      return absl::InvalidArgumentError(absl::StrCat("AUC: score NaN at index ", i, ", expected a number"));
    }
    positives += labels[i];
    sorted[i] = {scores[i], labels[i]};
  }
  const int64_t negatives = static_cast<int64_t>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AUC: ", positives, " positives and ", negatives, " negatives, expected at least one of each"));
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Ranks are 1-based; a run of ties [i, j) shares the rank (i + 1 + j) / 2.
  double positive_rank_sum = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    int64_t run_positives = 0;
    while (j < sorted.size() && sorted[j].first == sorted[i].first) run_positives += sorted[j++].second;
    positive_rank_sum += run_positives * (static_cast<double>(i + 1 + j) / 2);
    i = j;
  }
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

}  // namespace data
}  // namespace pstrain
