// The parameter servers as the scheduler sees them beyond membership (membership.h): where each
// shard lives, which checkpoints each server rank holds, which ranks stand vacant after a death,
// and the step the servers restore.
//
// Replicas (--replicas=2). Shard s starts on server s with its live copy on server (s + 1) mod S.
// When a server dies, each shard it served is served by its copy from then on (Promote), and each
// shard whose copy it held has none left. A death that takes a shard's last copy loses the shard
// (OnlyCopiesOn names those shards first, so the caller can fail the job instead).
//
// Recovery by checkpoints. Every live server reports the checkpoint steps it holds
// (SetCheckpoints); the lists stay after the server died, because its files stay for its
// replacement. A dead server's rank is vacant (Vacate) until a replacement takes it (Fill).
// A new vacancy drops the restore step, so a replacement never sees the cut of an earlier
// recovery; the caller sets it again (SetRestoreStep) once no rank is vacant, usually to
// NewestCommonStep() at the membership epoch of the registration that filled the last vacancy.
// A resumed job sets it once, to the step it resumes from.
//
// Everything here is part of the scheduler's saved state (Save, Restore).
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_SERVER_FLEET_H_
#define PSTRAIN_SCHEDULER_SERVER_FLEET_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

// The newest step that every list holds (each list ascending), i.e. the newest consistent cut of
// the servers' checkpoints, among the steps >= `from`; 0 when there is none or `steps_by_server`
// is empty. E.g. {{10, 20}, {10}} -> 10; {{10, 20}, {}} -> 0; {{10, 20}, {10}} from 15 -> 0.
int64_t NewestCommonStep(const std::vector<std::vector<int64_t>>& steps_by_server, int64_t from = 0);

class ServerFleet {
 public:
  // A job of `num_servers` server ranks (> 0); with `replicas`, every shard has a copy.
  ServerFleet(int num_servers, bool replicas);

  int num_servers() const { return static_cast<int>(checkpoints_.size()); }

  // --- Replicas ---

  // Whether shards have copies (--replicas=2).
  bool replicated() const { return !shard_hosts_.empty(); }
  // Where each shard lives now, by shard; empty without replicas.
  const std::vector<ShardHost>& shard_hosts() const { return shard_hosts_; }
  // The server that answers for `shard` now: its primary with replicas, else the shard's own rank.
  int PrimaryOf(int shard) const;
  // The shards that `rank` serves with no copy left: its death would lose them.
  std::vector<int> OnlyCopiesOn(int rank) const;
  // `rank` died: the copies of the shards it served become their primaries (no rollback: the copy
  // applied every step its primary answered), and the shards whose copy it held have none left.
  void Promote(int rank);
  // Whether some shard lost a copy (a promotion happened): not every shard is on its own server
  // with its copy on the next one. False without replicas.
  bool Degraded() const;
  // "shard 0 on server 1, no copy; shard 1 on server 1, copy on 0", for messages.
  std::string HostsLine() const;

  // --- Checkpoints ---

  // OK for a report of at most kMaxCheckpointSteps (member_limits.h) steps, >= 0 and strictly
  // ascending; INVALID_ARGUMENT naming the first that is not. Does not look at the rank.
  static absl::Status CheckReport(const CheckpointReport& report);
  // Replaces `rank`'s list with the report's steps. REQUIRES: CheckReport(report) is OK and the
  // report's rank is in [0, num_servers()).
  void SetCheckpoints(const CheckpointReport& report);
  // `rank`'s steps, ascending. REQUIRES: rank in [0, num_servers()).
  const std::vector<int64_t>& checkpoints(int rank) const { return checkpoints_[rank]; }
  // `rank`'s newest checkpoint step; 0 when it reported none.
  int64_t NewestCheckpoint(int rank) const;
  // The newest step every rank holds a checkpoint of (the free function above), from the resumed
  // cut on (SetResumeCut; 0 when none is newer): a rank's files of an earlier server count, left
  // by a server drained before the rank was added again, are of another layout and never a cut.
  int64_t NewestCommonStep() const;

  // The job changed its server count to `num_servers` (> 0): ranks from there on are dropped, new
  // ones start with no checkpoints. With replicas, every shard of the new count is placed afresh
  // (shard s on server s, its copy on the next); the caller has checked !Degraded() and
  // num_servers >= 2.
  void Resize(int num_servers);

  // --- A job resumed from a cut (scheduler/resume.h) ---

  // The job went on from the cut of `step`, taken under `servers` servers (possibly another
  // count than num_servers(): its ranks' files then are not this layout's shards).
  void SetResumeCut(int64_t step, int servers);
  // The step a recovery goes back to: NewestCommonStep(), but never before the resumed cut. Every
  // rank can restore the cut even without a file of its own at that step (it re-cuts the cut's
  // files of the old count), and no step before it belongs to this run's layout.
  int64_t RestorableStep() const;
  // ASYNC: the checkpoint a replacement for `rank` restores. Its newest one, except after a change
  // of the server count (the resumed cut of another count): its newest one after that cut, or
  // that cut itself, re-cut from the old count's files, while it has none of its own.
  int64_t OwnRestoreStep(int rank) const;
  // Whether the job no longer needs the resumed cut (a change of the server count, or a resume on
  // another count) to recover: not resumed on another count, or every rank has a checkpoint after
  // it, of a common step (SYNC) or of each rank's own (`each_rank`: ASYNC/SSP, whose servers
  // restore their own newest).
  bool HasOwnCutSinceResume(bool each_rank) const;
  // ASYNC: the oldest step no server may prune (CheckpointAck.keep_from_step): after a change of
  // the server count, its cut, until every rank holds a checkpoint of its own after it; -1 (no
  // bound) otherwise.
  int64_t AsyncKeepFrom() const;

  // --- Vacancies and the restore step ---

  // `rank`'s server died at `when` and waits for a replacement; drops the restore step unless
  // `keep_restore_step` (ASYNC, where the only restore step is the cut of the last change of the
  // server count: see OwnRestoreStep).
  void Vacate(int rank, absl::Time when, bool keep_restore_step);
  // A server took the vacant `rank` (nothing happens for a rank that was not vacant).
  void Fill(int rank);
  // Vacant ranks, each with when its server died.
  const std::map<int, absl::Time>& vacancies() const { return vacancies_; }
  // The step every server restores before it serves, set at membership epoch `epoch`. Drops the
  // steps after it from every rank's list: they are of the abandoned run.
  void SetRestoreStep(int64_t step, int64_t epoch);
  // `report` (CheckReport OK) less its steps after the restore step when its server's store serves
  // an epoch before the restore's (`store_epoch`, HeartbeatRequest.store_epoch; 0, not said: kept
  // whole): a server that has not restored yet still lists its files of the abandoned run, which
  // it deletes as it restores.
  CheckpointReport WithoutAbandonedSteps(CheckpointReport report, int64_t store_epoch) const;
  const std::optional<int64_t>& restore_step() const { return restore_step_; }
  int64_t restore_epoch() const { return restore_epoch_; }

  // Adds the shard hosts and, when set, the restore step and its epoch to `view`; and when the
  // restore step is a resumed cut of another server count, that count (restore_servers).
  void AddToView(ClusterView* view) const;

  // --- The saved state ---

  // Writes the checkpoint lists, vacancies, restore step and shard hosts into `state`.
  void Save(SchedulerState* state) const;
  // Replaces everything with what `state` saved (a list of a rank outside the job is ignored; a
  // state without shard hosts keeps the fresh ones). INVALID_ARGUMENT, changing nothing, for
  // checkpoint lists of more servers than the job has.
  absl::Status Restore(const SchedulerState& state);

 private:
  std::vector<std::vector<int64_t>> checkpoints_;  // by server rank, ascending
  std::map<int, absl::Time> vacancies_;
  std::optional<int64_t> restore_step_;
  int64_t restore_epoch_ = 0;
  int64_t resume_step_ = 0;
  int resume_servers_ = 0;              // 0: not resumed
  std::vector<ShardHost> shard_hosts_;  // by shard; empty without replicas

  // Whether the resumed cut was taken under another server count than num_servers().
  bool ResumedOnAnotherCount() const;
  // Shard s on server s, its copy on server (s + 1) mod num_servers.
  static std::vector<ShardHost> RingPlacement(int num_servers);
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SERVER_FLEET_H_
