// Work leases for ASYNC and SSP training.
//
// Each data epoch, positions [0, train_samples) of the epoch's sample permutation (the worker
// computes the permutation from the seed and the epoch) are cut into leases of
// lease_batches * batch_size positions, the last one shorter, and handed out in order to whoever
// asks. A faster worker simply asks more often. When an epoch's positions are used up every request
// for it answers epoch_done; the first request for the next epoch then opens it.
//
// With max_batches > 0 the pool hands out at most that many batches in the whole job (a lease's
// tail batch counts as one): later requests answer epoch_done.
//
// Every lease is recorded with the worker that got it, so a later change can hand a dead worker's
// unfinished leases to someone else.
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_LEASE_POOL_H_
#define PSTRAIN_SCHEDULER_LEASE_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {
namespace scheduler {

struct Lease {
  // True when the epoch has no positions left; the other fields are then 0.
  bool epoch_done = false;
  // 1, 2, ... in the order leases were handed out over the whole job.
  int64_t id = 0;
  int worker_rank = 0;
  int epoch = 0;
  // Positions [begin, end) of the epoch's permutation.
  int64_t begin = 0;
  int64_t end = 0;
};

class LeasePool {
 public:
  struct Options {
    int64_t train_samples = 0;
    int batch_size = 1;
    int lease_batches = 1;
    int epochs = 1;
    // Batches the whole job may lease; 0: no limit.
    int64_t max_batches = 0;
  };

  // REQUIRES: train_samples >= 0, batch_size >= 1, lease_batches >= 1, epochs >= 1,
  // max_batches >= 0 (the Scheduler validates the job first).
  explicit LeasePool(Options options);

  // The next lease of `epoch` for `worker_rank`.
  // OK with epoch_done = true when the epoch is used up (also for an epoch already left behind).
  // FAILED_PRECONDITION when `epoch` is ahead of the current one while the current one still has
  // positions, or more than one ahead; OUT_OF_RANGE when epoch is not in [0, epochs).
  absl::StatusOr<Lease> Next(int worker_rank, int epoch);

  // The epoch leases are being handed out for.
  int current_epoch() const { return epoch_; }
  int64_t batches_leased() const { return batches_leased_; }
  // Every lease handed out, in order.
  const std::vector<Lease>& leases() const { return leases_; }

 private:
  // True when the current epoch has no positions left or the job's batch budget is spent.
  bool Exhausted() const;

  const Options options_;
  int epoch_ = 0;
  int64_t next_position_ = 0;
  int64_t batches_leased_ = 0;
  std::vector<Lease> leases_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_LEASE_POOL_H_
