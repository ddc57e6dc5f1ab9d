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

// Global steps in a synchronous epoch: ceil(n / (B * W)); 0 when n == 0.
// REQUIRES: n >= 0, batch_size >= 1, num_workers >= 1.
int64_t SyncStepsPerEpoch(int64_t n, int batch_size, int num_workers);

// Worker `rank`'s share of global batch `step_in_epoch`. Global batch t covers positions
// [t*B*W, min((t+1)*B*W, n)); rank r takes [t*B*W + r*B, t*B*W + (r+1)*B) clipped to it, so in a
// short last batch low ranks fill first and high ranks may get an empty range.
// A step at or past SyncStepsPerEpoch gives the empty range [n, n).
// REQUIRES: as SyncStepsPerEpoch, 0 <= rank < num_workers, step_in_epoch >= 0.
Range SyncSlice(int64_t n, int batch_size, int num_workers, int rank, int64_t step_in_epoch);

// The same split when the number of live workers changes during the job: the global batch stays
// `global_batch` samples (the job's B x W), and global batch t is cut into `num_live` pieces of
// ceil(global_batch / num_live) positions; the worker in slot `slot` (its position among the live
// workers) takes piece `slot`, clipped to the batch. With num_live == W this is SyncSlice exactly.
// REQUIRES: n >= 0, global_batch >= 1, num_live >= 1, 0 <= slot < num_live, step_in_epoch >= 0.
Range SyncSliceOfGlobalBatch(int64_t n, int64_t global_batch, int num_live, int slot,
                             int64_t step_in_epoch);

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
