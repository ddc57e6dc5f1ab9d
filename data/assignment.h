// Which samples each worker trains on: slices of the epoch permutation.
//
// Everything here works on permutation *positions* [0, n), not sample indices; a caller maps a
// position p to a sample with perm[p] (see GatherRange in data/batch.h). Pure arithmetic, no
// state; safe from any thread. Arguments outside the REQUIRES are programmer errors (CHECK).
//
// Synchronous mode, B = batch_size, W = num_workers, n = 10, B = 3, W = 2:
//
//   positions   0 1 2 | 3 4 5 | 6 7 8 | 9
//   step 0      rank 0| rank 1|
//   step 1                    | rank 0| rank 1 gets [9, 10)
//
// and with n = 8 the last step gives rank 0 [6, 8) and rank 1 the empty range [8, 8): it still
// takes part in the step with weight zero. No padding, no duplicates.
#ifndef PSTRAIN_DATA_ASSIGNMENT_H_
#define PSTRAIN_DATA_ASSIGNMENT_H_

#include <cstdint>

namespace pstrain {
namespace data {

// Half-open range [begin, end) of positions.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
  bool operator!=(const Range& o) const { return !(*this == o); }
};

// Synchronous mode. Global batch t of an epoch covers permutation positions
// [t*G, min((t+1)*G, n)), G = global_batch (the job's batch_size x num_workers, fixed for the
// whole job so the maths does not change when workers come and go).

// Global batches in an epoch: ceil(n / G); 0 when n == 0. REQUIRES: n >= 0, global_batch >= 1.
int64_t SyncStepsPerEpoch(int64_t n, int64_t global_batch);

// Samples in global batch `step_in_epoch` (G except for the epoch's last, shorter batch; 0 past
// the end). REQUIRES: as SyncStepsPerEpoch, step_in_epoch >= 0.
int64_t SyncGlobalBatchSize(int64_t n, int64_t global_batch, int64_t step_in_epoch);

// A live worker's share of global batch `step_in_epoch`: the batch is cut into `num_live` pieces
// of ceil(global_batch / num_live) positions and the worker in slot `slot` (its position among the
// live workers) takes piece `slot`, clipped to the batch. With all W workers of the job live, rank r
// takes [t*B*W + r*B, ... + B): low ranks fill first in the last, shorter batch and a high rank may
// get an empty range (it still takes part with weight zero). No padding, no duplicates. A step at
// or past SyncStepsPerEpoch gives the empty range [n, n).
// REQUIRES: n >= 0, global_batch >= 1, num_live >= 1, 0 <= slot < num_live, step_in_epoch >= 0.
Range SyncSliceOfGlobalBatch(int64_t n, int64_t global_batch, int num_live, int slot, int64_t step_in_epoch);

// Contiguous split of [0, n) into `parts` ranges whose sizes differ by at most one (the first
// n % parts ranges are one longer). Used to split evaluation.
// REQUIRES: n >= 0, parts >= 1, 0 <= index < parts.
Range EvenSlice(int64_t n, int parts, int index);

// Batches of a lease [begin, end): batch i is [begin + i*B, min(begin + (i+1)*B, end)).
// REQUIRES: lease.begin <= lease.end, batch_size >= 1; for BatchOf 0 <= i < NumBatches.
int64_t NumBatches(Range lease, int batch_size);
Range BatchOf(Range lease, int batch_size, int64_t i);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_ASSIGNMENT_H_
