#include "data/assignment.h"

#include <glog/logging.h>

#include <algorithm>

namespace pstrain {
namespace data {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t SyncStepsPerEpoch(int64_t n, int64_t global_batch) {
  CHECK_GE(n, 0);
  CHECK_GE(global_batch, 1);
  return CeilDiv(n, global_batch);
}

int64_t SyncGlobalBatchSize(int64_t n, int64_t global_batch, int64_t step_in_epoch) {
  CHECK_GE(step_in_epoch, 0);
  if (step_in_epoch >= SyncStepsPerEpoch(n, global_batch)) return 0;
  return std::min(global_batch, n - step_in_epoch * global_batch);
}

Range SyncSliceOfGlobalBatch(int64_t n, int64_t global_batch, int num_live, int slot, int64_t step_in_epoch) {
  CHECK_GE(n, 0);
  CHECK_GE(global_batch, 1);
  CHECK_GE(num_live, 1);
  CHECK(slot >= 0 && slot < num_live) << "slot " << slot << " of " << num_live;
  CHECK_GE(step_in_epoch, 0);
  if (step_in_epoch >= CeilDiv(n, global_batch)) return Range{n, n};
  const int64_t piece = CeilDiv(global_batch, num_live);
  const int64_t global_begin = step_in_epoch * global_batch;
  const int64_t global_end = std::min(global_begin + global_batch, n);
  Range r;
  r.begin = std::min(global_begin + int64_t{slot} * piece, global_end);
  r.end = std::min(r.begin + piece, global_end);
  return r;
}

Range EvenSlice(int64_t n, int parts, int index) {
  CHECK_GE(n, 0);
  CHECK_GE(parts, 1);
  CHECK(index >= 0 && index < parts) << "index " << index << " of " << parts;
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  Range r;
  r.begin = index * base + std::min<int64_t>(index, extra);
  r.end = r.begin + base + (index < extra ? 1 : 0);
  return r;
}

int64_t NumBatches(Range lease, int batch_size) {
  CHECK_LE(lease.begin, lease.end);
  CHECK_GE(batch_size, 1);
  return CeilDiv(lease.size(), batch_size);
}

Range BatchOf(Range lease, int batch_size, int64_t i) {
  CHECK(i >= 0 && i < NumBatches(lease, batch_size))
      << "batch " << i << " of lease [" << lease.begin << ", " << lease.end << ") with batch size " << batch_size;
  Range r;
  r.begin = lease.begin + i * batch_size;
  r.end = std::min(r.begin + batch_size, lease.end);
  return r;
}

}  // namespace data
}  // namespace pstrain
