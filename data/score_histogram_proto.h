// data::ScoreHistogram to and from its wire form, the ScoreHistogram message of
// proto/scheduler.proto: the bin layout and the non-empty bins only, so a worker's report holds
// at most as many entries as its lease has samples (or kNumBins), not the whole 1 MiB.
//
// Kept apart from data/score_histogram.h so that the data library stays free of protos: the worker
// (which sends histograms) and the scheduler (which merges them) link this too.
#ifndef PSTRAIN_DATA_SCORE_HISTOGRAM_PROTO_H_
#define PSTRAIN_DATA_SCORE_HISTOGRAM_PROTO_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/score_histogram.h"
#include "proto/scheduler.pb.h"

namespace pstrain {
namespace data {

// The non-empty bins of `histogram`, ascending, with the layout.
pstrain::ScoreHistogram ScoreHistogramToProto(const ScoreHistogram& histogram);

// Checks a received histogram: INVALID_ARGUMENT for another bin layout (num_bins, max_logit) and
// as ScoreHistogram::CheckBins (lists of different lengths, a bin out of range, counts that
// overflow). Otherwise the number of predictions it holds.
absl::StatusOr<int64_t> CheckScoreHistogramProto(const pstrain::ScoreHistogram& message);

// Adds a received histogram to `*into` (borrowed for the call). Errors as
// CheckScoreHistogramProto, adding nothing.
absl::Status MergeScoreHistogramProto(const pstrain::ScoreHistogram& message, ScoreHistogram* into);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_SCORE_HISTOGRAM_PROTO_H_
