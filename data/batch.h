// Copies samples of a Dataset into the dense buffers a model step consumes.
//
// Free functions; they only read the Dataset, so concurrent calls on one Dataset are safe as long
// as the output buffers differ. Never block.
#ifndef PSTRAIN_DATA_BATCH_H_
#define PSTRAIN_DATA_BATCH_H_

#include <cstdint>

#include "absl/types/span.h"
#include "data/assignment.h"
#include "data/dataset.h"

namespace pstrain {
namespace data {

// Copies the samples at `indices` (dataset sample indices, any order, repeats allowed) into
// `x` (indices.size() * data.features() floats, row i = sample indices[i]) and `labels`
// (indices.size() ints). Either output may be null to skip it. The caller owns the buffers.
// REQUIRES (CHECK): every index in [0, data.num_samples).
void GatherBatch(const Dataset& data, absl::Span<const int64_t> indices, float* x, int32_t* labels);

// Gathers the samples at permutation positions [range.begin, range.end) of `perm`, i.e.
// GatherBatch(data, perm[range], x, labels); x and labels hold range.size() samples.
// REQUIRES (CHECK): 0 <= range.begin <= range.end <= perm.size().
void GatherRange(const Dataset& data, absl::Span<const int64_t> perm, Range range, float* x, int32_t* labels);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_BATCH_H_
