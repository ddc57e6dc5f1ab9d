#include "data/score_histogram_proto.h"

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace pstrain {
namespace data {
namespace {

absl::Status CheckLayout(const pstrain::ScoreHistogram& message) {
  if (message.num_bins() != static_cast<uint32_t>(ScoreHistogram::kNumBins) ||
      message.max_logit() != ScoreHistogram::kMaxLogit) {
    return absl::InvalidArgumentError(
        absl::StrCat("score histogram: layout of ", message.num_bins(), " bins over logits [-", message.max_logit(),
                     ", ", message.max_logit(), "], expected ", ScoreHistogram::kNumBins, " bins over [-",
                     ScoreHistogram::kMaxLogit, ", ", ScoreHistogram::kMaxLogit, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

pstrain::ScoreHistogram ScoreHistogramToProto(const ScoreHistogram& histogram) {
  pstrain::ScoreHistogram message;
  message.set_num_bins(ScoreHistogram::kNumBins);
  message.set_max_logit(ScoreHistogram::kMaxLogit);
  histogram.ForEachNonEmpty([&](uint32_t bin, int64_t positives, int64_t negatives) {
    message.add_bins(bin);
    message.add_positives(static_cast<uint64_t>(positives));
    message.add_negatives(static_cast<uint64_t>(negatives));
  });
  return message;
}

absl::StatusOr<int64_t> CheckScoreHistogramProto(const pstrain::ScoreHistogram& message) {
  if (absl::Status s = CheckLayout(message); !s.ok()) return s;
  return ScoreHistogram::CheckBins(message.bins(), message.positives(), message.negatives());
}

absl::Status MergeScoreHistogramProto(const pstrain::ScoreHistogram& message, ScoreHistogram* into) {
  if (absl::Status s = CheckLayout(message); !s.ok()) return s;
  return into->AddBins(message.bins(), message.positives(), message.negatives());
}

}  // namespace data
}  // namespace pstrain
