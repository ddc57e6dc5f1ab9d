// A change of the job's server count while it trains (docs/design/resharding.md): the one asked
// for and not done yet, and the ones done, for the run summary.
//
// An operator asks for a count (Request). Growing, the change waits until a server has registered
// for each added rank (the Scheduler tells: Ready). Then it waits for the first consistent
// checkpoint cut newer than the newest one at that time (DueAt), so that only the steps trained
// between the cut and its report are trained again. At that cut the Scheduler cuts over: a new
// shard map for the new count, and every server restores the cut re-sharded (CutOver records it).
// Shrinking is ready at once; the servers of the highest ranks are drained.
//
//   Request --(grow: every added rank registered; shrink: at once)--> ready
//           --(a checkpoint cut newer than the newest at ready)--> cut over (Done)
//
// ASYNC servers checkpoint on their own clocks, so no cut is common to them. Once ready, the
// Scheduler hands out no fresh training lease (only the remainders of gone workers), and once
// every lease is complete it asks every server for a checkpoint of one step beyond all of theirs
// (QuietCut: HeartbeatResponse.checkpoint_at_step). That quiet cut is the one it cuts over at:
//
//   ready --(every lease complete)--> quiet cut asked --(every server holds it)--> cut over
//
// One change at a time: a request while one is pending is refused, naming it.
//
// Each server of the new map then reports what its re-cut cost it (Resharded: its pause, and the
// rows and bytes of its new shard that another server held), once per change.
//
// The pending change and the done ones are part of the scheduler's saved state (Save, Restore):
// a scheduler restarted while a change is pending goes on with it.
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_SERVER_SCALING_H_
#define PSTRAIN_SCHEDULER_SERVER_SCALING_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

class ServerScaling {
 public:
  // The most servers a job may be scaled to.
  static constexpr int kMaxServers = kMaxJobServers;
  // The changes done that are kept for the summary: the newest.
  static constexpr size_t kMaxDone = 100;

  struct Pending {
    int from = 0;
    int to = 0;
    absl::Time requested;
    // Set once ready: the cut-over waits for a cut newer than this step.
    std::optional<int64_t> after_cut;
    // ASYNC, set once ready and quiet: the step every server is asked to checkpoint.
    std::optional<int64_t> quiet_cut;
    // When it became ready (not saved: a restored change counts from its request).
    absl::Time ready;
  };
  struct Done {
    int from = 0;
    int to = 0;
    // The cut the servers restored under the new map.
    int64_t step = 0;
    int64_t shard_map_version = 0;
    absl::Time requested;
    absl::Time cut_over;
    // What each server of the new map reported of its re-cut, by server rank.
    std::map<int, ReshardReport> resharded;
  };

  // Records a request for `to` servers on a job of `current` servers at `now`. INVALID_ARGUMENT
  // for `to` < 1 or > kMaxServers, or `to` == current; FAILED_PRECONDITION while another change is
  // pending (naming it). Nothing changes on error.
  absl::Status Request(int to, int current, absl::Time now);

  const std::optional<Pending>& pending() const { return pending_; }
  // The pending change is ready at `now`: it cuts over at the first cut newer than `newest_cut`.
  // Does nothing when none is pending or it is ready already.
  void Ready(int64_t newest_cut, absl::Time now);
  // Whether the pending change is ready and `newest_cut` is newer than the cut at its readiness;
  // with a quiet cut, whether `newest_cut` is that cut (or a newer one).
  bool DueAt(int64_t newest_cut) const;
  // ASYNC: the pending ready change cuts over at the quiet cut of `step` (the servers are asked for
  // it). Does nothing when none is pending, it is not ready, or its quiet cut is this step or a
  // later one already.
  void QuietCut(int64_t step);
  // The pending change cut over at the cut of `step`, publishing map `shard_map_version`.
  // REQUIRES: a change is pending.
  void CutOver(int64_t step, int64_t shard_map_version, absl::Time now);
  // An added server died before the cut-over: the pending change waits again for every added
  // rank (Ready).
  void Unready() {
    if (!pending_.has_value()) return;
    pending_->after_cut.reset();
    pending_->quiet_cut.reset();
  }
  // The pending change is abandoned (e.g. the job ended first); `why` is logged by the caller.
  void Abandon() { pending_.reset(); }

  const std::deque<Done>& done() const { return done_; }
  // Server `rank` reports its re-cut for the map `report.shard_map_version()`: kept with that change
  // the first time (a report for a map no change made, of a rank outside the change's new count, or
  // again, is ignored). Returns whether it was kept.
  bool Resharded(int rank, const ReshardReport& report);

  void Save(ServerScalingState* out) const;
  // Replaces the pending and done changes with `state`'s. INVALID_ARGUMENT, changing nothing, for
  // a count outside [1, kMaxServers] or a change from a count to itself, naming it.
  absl::Status Restore(const ServerScalingState& state);
  // "2 -> 3 servers", for messages.
  static std::string Describe(int from, int to);

 private:
  std::optional<Pending> pending_;
  std::deque<Done> done_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SERVER_SCALING_H_
