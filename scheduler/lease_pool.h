// Work leases for ASYNC and SSP training: every batch of an epoch is trained exactly once, even
// when workers die or leave mid-lease.
//
// Each data epoch, positions [0, train_samples) of the epoch's sample permutation (the worker
// computes the permutation from the seed and the epoch) are cut into leases of
// lease_batches * batch_size positions, the last one shorter, and handed out in order to whoever
// asks. A faster worker simply asks more often. Workers report how many batches of each lease they
// pushed (Record), which counts their steps; a lease is complete only when every server confirms
// it has applied each of the lease's batches (Confirm, from the servers' heartbeats). A worker
// that claims a lease done without pushing it therefore completes nothing: the lease stays out
// with it until it is evicted (Scheduler, holding up the epoch's end) and then goes to another.
//
//   cut --(Next)--> out --(Confirm: every server applied all batches)--> complete
//                   ^  |
//                   |  +--(Release: its holder died or left)--> remainder
//                   +-------------(Next, from first_batch)----------+
//
// A remainder keeps its id and its [begin, end) and restarts at the lowest count of batches the
// servers confirmed for it; batches its dead holder pushed but that were not confirmed yet are
// pushed again, and the servers skip them (they apply each (data_epoch, lease_id, lease_batch)
// once).
//
// Next answers, in this order: the remainder with the lowest id; a freshly cut lease; `wait` while
// some lease of the epoch is out; `epoch_done` once the epoch's positions are cut and every lease
// of it is complete. The first request for the next epoch then opens it.
//
// With max_batches > 0 the pool cuts at most that many batches in the whole job (a lease's tail
// batch counts as one; remainders do not count again): once they are cut, an epoch is done when
// the leases cut so far are complete, and later epochs are done at once.
//
// Reports and confirmations only ever raise a count: a dead holder's last report may arrive after
// its remainder moved on, and a server rolled back to a checkpoint confirms less than it did.
//
// Memory stays bounded however long the job: a lease is *settled* once it is complete and its
// holder reported all of it or left, and the settled leases at the front of the id order are
// dropped (first_id() rises: the watermark). What the pool keeps, and writes into the saved state,
// is the leases from the lowest unsettled one on: those out, the remainders, and the complete ones
// cut after them. A report or confirmation naming a dropped lease has nothing left to change and
// is passed over.
//
// A data stream (Options::stream; docs/design/streaming.md) is one endless epoch over the records
// ready so far (SetStream raises them): once they are all cut, Next answers `wait` until more are
// ready, and `epoch_done` only after the stream ended and every lease is complete.
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_LEASE_POOL_H_
#define PSTRAIN_SCHEDULER_LEASE_POOL_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

// An answer of LeasePool::Next.
struct Lease {
  // No lease now, but some are out and may come back: ask again shortly. The fields below are 0.
  bool wait = false;
  // Every lease of the epoch is complete; the fields below are 0.
  bool epoch_done = false;
  // 1, 2, ... in the order leases were cut over the whole job; a remainder keeps its id.
  int64_t id = 0;
  int worker_rank = 0;
  int epoch = 0;
  // Positions [begin, end) of the epoch's permutation.
  int64_t begin = 0;
  int64_t end = 0;
  // The batch to start at: 0 for a fresh lease, the batches every server confirmed for a remainder.
  int64_t first_batch = 0;
};

// One lease as the pool records it.
struct LeaseRecord {
  int64_t id = 0;
  int epoch = 0;
  int64_t begin = 0;
  int64_t end = 0;
  // ceil((end - begin) / batch_size).
  int64_t batches = 0;
  // The highest batches_done its holders reported.
  int64_t batches_done = 0;
  // Batches applied on each server (index: server rank), as the servers confirmed.
  std::vector<int64_t> applied;
  // Every batch is applied on every server whose confirmations count (LeasePool::Confirm).
  bool done = false;
  // The worker it is out with; -1 while it is a remainder in the pool.
  int holder = -1;
  // Every worker it was handed to, in order.
  std::vector<int> holders;

  bool complete() const { return done; }
  int64_t samples() const { return end - begin; }
};

class LeasePool {
 public:
  struct Options {
    int64_t train_samples = 0;
    int batch_size = 1;
    int lease_batches = 1;
    int epochs = 1;
    // Batches the whole job may cut; 0: no limit.
    int64_t max_batches = 0;
    // Servers whose confirmations complete a lease (ranks 0 .. num_servers - 1).
    int num_servers = 1;
    // A data stream: train_samples are the records ready at first (SetStream raises them), and
    // the one epoch ends only once the stream has ended. REQUIRES: epochs == 1, max_batches == 0.
    bool stream = false;
  };

  // REQUIRES: train_samples >= 0, batch_size >= 1, lease_batches >= 1, epochs >= 1,
  // max_batches >= 0, num_servers >= 1 (the Scheduler validates the job first).
  explicit LeasePool(Options options);

  // A stream pool: `records` are ready now (never fewer than before; a smaller number is ignored),
  // and whether the stream has ended. No effect on a pool that is not a stream's.
  void SetStream(int64_t records, bool ended);

  // The next lease of `epoch` for `worker_rank`, a remainder first; or wait / epoch_done (see the
  // file comment). epoch_done also for an epoch already left behind. FAILED_PRECONDITION when
  // `epoch` is ahead of the current one while the current one is not done, or more than one
  // ahead; OUT_OF_RANGE when epoch is not in [0, epochs). Nothing changes on an error.
  absl::StatusOr<Lease> Next(int worker_rank, int epoch);

  // Checks `report.leases` without recording anything: INVALID_ARGUMENT for an unknown lease id (0,
  // or one not cut yet), and for a lease the pool still keeps: of an epoch other than
  // report.epoch, batches_done outside [0, the lease's batches], or a worker the lease was never
  // handed to. A settled lease that was dropped passes (Record passes over it).
  absl::Status Check(const ProgressReport& report) const;

  // Records `report.leases` (REQUIRES: Check was OK): each lease's batches_done rises to the
  // reported value, whoever holds it now. Completes a lease only where a replacement server
  // counts the holders' reports (SetServerCounts); returns the leases it completed.
  std::vector<LeaseRecord> Record(const ProgressReport& report);

  // Records what server `server_rank` has applied (HeartbeatRequest.applied_leases): each listed
  // lease's count for that server rises to the reported one. Entries that do not fit (an unknown
  // lease id, another epoch than the lease's, more batches than the lease has, a rank outside
  // [0, num_servers)) are skipped and counted in *skipped (may be null): a server that restarted
  // may report an epoch the pool left. Returns the leases this completed; over the job each lease
  // is returned once.
  std::vector<LeaseRecord> Confirm(int server_rank, const AppliedLeases& applied, int* skipped = nullptr);

  // The lowest lease id of the current epoch that server `server_rank` has not confirmed in full
  // (num_leases() + 1 when it confirmed every one): where its next report should start
  // (HeartbeatResponse.report_leases_from).
  int64_t ReportFrom(int server_rank);

  // Whether server `server_rank`'s confirmations count (all do at first). A dead server's stop
  // counting: its shard is served by a promoted copy, or by a replacement. A replacement restores
  // an older checkpoint and never sees again the batches its predecessor applied (its count of a
  // lease the predecessor had begun stops at that gap), so for the leases cut before a rank counts
  // again, what their holders report stands in for that server's confirmation (the one place where
  // a worker's word counts). Returns the leases this completed.
  std::vector<LeaseRecord> SetServerCounts(int server_rank, bool counts);

  // The job changed its server count (scheduler/server_scaling.h): confirmations of ranks
  // 0 .. num_servers - 1 count from now on. REQUIRES: num_servers >= 1, and no lease is incomplete
  // (an ASYNC change cuts over at a quiet cut), so no lease waits for a rank that left, and every
  // lease kept is complete on a new rank too.
  void SetNumServers(int num_servers);
  int num_servers() const { return num_servers_; }
  // While held, Next answers `wait` where it would cut a fresh lease (remainders still go out, and
  // epoch_done as before): a pending ASYNC change of the server count waits for every lease to be
  // complete. Not saved with the pool: the Scheduler sets it from the pending change.
  void set_hold_fresh(bool hold) { hold_fresh_ = hold; }
  // Leases of the current epoch not complete yet: out with a worker or remainders in the pool.
  int64_t num_incomplete() const { return incomplete_; }

  // `worker_rank` is gone: the incomplete leases it holds become remainders, and the complete ones
  // settle (it will report no more of them). Returns how many remainders.
  int Release(int worker_rank);
  // Forgets what was handed to the gone workers `forgotten` says the membership no longer
  // remembers (their reports are refused by then), so the pool's state does not grow with every
  // worker that ever came and went.
  void ForgetWorkers(const std::function<bool(int)>& forgotten);

  // The epoch leases are being handed out for.
  int current_epoch() const { return epoch_; }
  // Whether `epoch`'s training is over: an epoch left behind, the current one once every position
  // is cut and every lease of it complete, a later one once the job's batch budget is spent and
  // every lease cut is complete. Evaluation leases of an epoch go out only then (Scheduler).
  bool EpochTrained(int epoch) const;
  // Batches of the leases handed to `worker_rank` (counted from each hand-out's first_batch): what
  // its progress reports may claim at most.
  int64_t BatchesHandedTo(int worker_rank) const;
  // Batches cut so far (for max_batches).
  int64_t batches_leased() const { return batches_leased_; }
  // Leases of the current epoch handed out and not complete yet (remainders waiting in the pool
  // are not out).
  int64_t num_out() const { return incomplete_ - static_cast<int64_t>(remainders_.size()); }
  // The workers the end of the current epoch waits for: every position is cut, and these ranks
  // hold leases of it that are not complete (sorted, once each). Empty while positions remain to
  // be cut, while a stream goes on, and once the epoch is done. A worker asking for a lease meanwhile is told to wait,
  // so this is a barrier in all but name (scheduler/stuck_barriers.h reports it when it lasts).
  std::vector<int> EpochEndWaitsFor() const;
  // Batches applied on every server over the incomplete leases of the current epoch that
  // `worker_rank` holds: rises while it trains them (the Scheduler's hold-up rule watches it).
  int64_t ConfirmedHeldBy(int worker_rank) const;
  // Leases cut so far; their ids are 1..num_leases().
  int64_t num_leases() const { return first_id_ - 1 + static_cast<int64_t>(leases_.size()); }
  // The watermark: every lease below this id is settled (complete, and reported by its holder or
  // given up by it) and dropped; the pool keeps ids first_id() .. num_leases().
  int64_t first_id() const { return first_id_; }
  // Leases the pool keeps.
  int64_t num_kept() const { return static_cast<int64_t>(leases_.size()); }
  // REQUIRES: first_id() <= id <= num_leases().
  const LeaseRecord& lease(int64_t id) const { return leases_[static_cast<size_t>(id - first_id_)]; }
  // The lease with this id while the pool keeps it; nullptr for a dropped or unknown one.
  const LeaseRecord* Find(int64_t id) const;
  // The current epoch's positions below this one are trained and settled: the begin of the lowest
  // lease kept of the epoch, or the next position to cut when none is kept. (A stream's records
  // below it are trained, and every score of them reported, or lost with a holder that left.)
  int64_t SettledPosition() const;

  // Everything above as a proto, and back (scheduler/snapshot.cc). Restore replaces the pool's
  // state; INVALID_ARGUMENT, changing nothing, for a state that is not consistent (ids out of
  // order, an epoch outside the job's, batches_done above batches, epoch_first past the end).
  LeasePoolState ToProto() const;
  absl::Status Restore(const LeasePoolState& state);

 private:
  // True when the current epoch's positions are all cut or the job's batch budget is spent.
  bool Exhausted() const;
  LeaseRecord* FindKept(int64_t id) { return const_cast<LeaseRecord*>(std::as_const(*this).Find(id)); }
  // Drops the settled leases at the front (the watermark rises past them).
  void DropSettled();
  // The first id of the current epoch the pool keeps (epoch_first_id_, or first_id_ when higher).
  int64_t EpochFirstKept() const { return std::max(epoch_first_id_, first_id_); }
  // Batches applied on every server whose confirmations count (the holders' reports when none
  // does).
  int64_t Confirmed(const LeaseRecord& lease) const;
  // Marks `lease` done when Confirmed reaches its batches; appends it to *completed then.
  void MaybeComplete(LeaseRecord& lease, std::vector<LeaseRecord>* completed);
  // Adds `lease`'s batches to what `worker_rank` was handed (BatchesHandedTo).
  void CountHandedTo(int worker_rank, const LeaseRecord& lease);
  // True when the current epoch is Exhausted and every lease of it is complete (a stream: and it
  // has ended).
  bool EpochDone() const { return Exhausted() && incomplete_ == 0 && (!options_.stream || stream_ended_); }

  const Options options_;
  // options_.num_servers, until the job changes its server count (SetNumServers).
  int num_servers_ = 1;
  bool hold_fresh_ = false;
  // options_.train_samples, or the stream's ready records (SetStream).
  int64_t train_samples_ = 0;
  bool stream_ended_ = false;
  int epoch_ = 0;
  int64_t next_position_ = 0;
  int64_t batches_leased_ = 0;
  // The leases kept: ids first_id_, first_id_ + 1, ... (indexed by id - first_id_).
  std::deque<LeaseRecord> leases_;
  int64_t first_id_ = 1;
  // The id of the current epoch's first lease (it may have been dropped since).
  int64_t epoch_first_id_ = 1;
  // Leases of the current epoch not complete yet (out or remainders).
  int64_t incomplete_ = 0;
  // Ids of the remainders waiting in the pool.
  std::set<int64_t> remainders_;
  // Per server rank: no lease of the current epoch below this id lacks its confirmation (ReportFrom).
  std::vector<int64_t> report_from_;
  // Per server rank: whether its confirmations count (SetServerCounts).
  std::vector<bool> counts_;
  // Per server rank: leases with ids up to this one take their holders' reports for that server's
  // confirmation (a replacement; SetServerCounts). 0: none.
  std::vector<int64_t> reports_count_upto_;
  // Per worker rank: BatchesHandedTo, kept as leases are handed out (dropped leases count too), and
  // saved with the pool.
  std::map<int, int64_t> handed_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_LEASE_POOL_H_
