// The training batches one parameter store applied in its current data epoch (ASYNC/SSP), and what
// the server confirms of them to the scheduler.
//
// Workers push leased batches, each (lease_id, lease_batch) once per data epoch; a repeat (the
// remainder of a dead worker's lease, pushed again) must be skipped. Besides answering "applied
// already?", this keeps for each lease how many of its batches are applied from batch 0 with no
// gap: the count the server reports in its heartbeats (HeartbeatRequest.applied_leases), from
// which the scheduler decides that a lease is complete (scheduler/lease_pool.h). A worker that
// claims a lease done without pushing it therefore completes nothing.
//
// Memory: one entry per lease of the data epoch the store has seen a batch of and the scheduler
// has not settled yet, plus the batches applied ahead of a gap (normally none: a lease's batches
// come in order). The scheduler's watermark (HeartbeatResponse.leases_settled_below) drops the
// settled leases: each is complete on every server, so any later push of one is a repeat, and
// Add says so without keeping it. An endless data epoch (a data stream) therefore keeps only the
// leases in flight. Not thread-safe: the store guards it with its lock.
#ifndef PSTRAIN_SERVER_APPLIED_BATCHES_H_
#define PSTRAIN_SERVER_APPLIED_BATCHES_H_

#include <cstdint>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "proto/scheduler.pb.h"

namespace pstrain::server {

// Leases one heartbeat confirms at most; the scheduler refuses more (scheduler/member_limits.h,
// kMaxAppliedLeases, the same number). The rest go in later heartbeats.
inline constexpr int kMaxReportedLeases = 4096;

class AppliedBatches {
 public:
  // Records batch `batch` of lease `lease_id`. False when it was recorded already, or the lease is
  // below the watermark (a repeat, to be skipped). REQUIRES: lease_id >= 1, batch >= 0.
  bool Add(int64_t lease_id, int64_t batch);

  // Forgets every lease (a new data epoch, or a rollback to a checkpoint); the watermark stays:
  // lease ids grow over the whole job.
  void Clear() { leases_.clear(); }

  // The scheduler settled every lease below `lease_id`: drops them, and answers repeat for their
  // batches from now on. A lower watermark than the current one changes nothing.
  void SettleBelow(int64_t lease_id);
  int64_t settled_below() const { return settled_below_; }

  // Fills `out`'s lease_ids and batches (ascending ids from `first_lease_id` on, at most
  // `max_leases` of them) with each lease's count of batches applied from batch 0 with no gap;
  // leases with batch 0 not applied yet are left out. Leaves out->data_epoch alone.
  void Report(int64_t first_lease_id, int max_leases, AppliedLeases* out) const;

  // Leases with any batch recorded.
  size_t num_leases() const { return leases_.size(); }

 private:
  struct Lease {
    // Batches 0 .. prefix - 1 are applied.
    int64_t prefix = 0;
    // Batches past the prefix applied before a gap was filled.
    absl::flat_hash_set<int64_t> ahead;
  };
  absl::btree_map<int64_t, Lease> leases_;
  int64_t settled_below_ = 0;
};

// What two stores of one server (its own shard and the copy it keeps) have both applied: the leases
// in both reports, each with the smaller count. Empty when they are in different data epochs (the
// next report, once both are in the newer one, says it).
AppliedLeases AppliedOnBoth(const AppliedLeases& a, const AppliedLeases& b);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_APPLIED_BATCHES_H_
