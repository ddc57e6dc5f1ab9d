// Scheduler, part two: the servers. What their death means (a vacant rank waiting for a
// replacement, or a replica promoted: the ServerFleet keeps which), the checkpoint lists they
// report, and the slow steps they report. Everything here runs under mu_ or takes it; see
// scheduler.h.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "glog/logging.h"
#include "scheduler/member_limits.h"

namespace pstrain {
namespace scheduler {

bool Scheduler::RecoversServersLocked() const { return state_ == RUNNING && CheckpointsOn(options_.job); }

bool Scheduler::PromotesReplicasLocked() const { return state_ == RUNNING && fleet_.replicated(); }

void Scheduler::PromoteReplicasLocked(int rank, absl::string_view reason, Deferred* deferred) {
  if (Ended()) return;
  const std::vector<int> lost = fleet_.OnlyCopiesOn(rank);
  if (!lost.empty()) {
    EndLocked(FAILED,
              absl::UnavailableError(
                  absl::StrCat(reason, "; server ", rank, " held the only copy of shard ", absl::StrJoin(lost, ", "),
                               " (its other copy was lost earlier); --replicas=2 survives one lost copy per shard")),
              deferred);
    return;
  }
  absl::StatusOr<bool> removed = membership_.Remove(SERVER, rank, ChangeKind::kDied, Now());
  if (!removed.ok() || !*removed) return;
  // The promoted copy's host confirms the shard's leases from now on.
  CountLeasesLocked(leases_->SetServerCounts(rank, false), deferred);
  // The epoch bump aborts the unfinished step on every store; the workers recompute it against
  // the new hosts, so the promoted copy, which applied every step the dead primary answered, loses
  // nothing.
  fleet_.Promote(rank);
  LOG(WARNING) << "server " << rank << " died (" << reason << "); its shard's copy is promoted, no rollback ("
               << fleet_.HostsLine() << "); " << MembershipLine();
  if (scaling_.pending().has_value()) {
    // The new map places both copies of every shard afresh, from a cut of the old one taken with
    // both; a shard with one copy left stays where it is.
    CancelScalingLocked(absl::StrCat("server ", rank, " died and a shard lost its copy"), deferred);
    SaveLocked(deferred);
    return;  // CancelScalingLocked published the view
  }
  PublishParticipantsLocked(deferred);
}

void Scheduler::RemoveServerLocked(int rank, absl::string_view reason, Deferred* deferred) {
  if (OutsideMapLocked(rank)) {
    RemoveOutsideServerLocked(rank, ChangeKind::kDied, reason, deferred);
    return;
  }
  if (PromotesReplicasLocked()) {
    PromoteReplicasLocked(rank, reason, deferred);
    return;
  }
  if (FailForLostFinalShardLocked(rank, reason, deferred)) return;
  const absl::Time now = Now();
  absl::StatusOr<bool> removed = membership_.Remove(SERVER, rank, ChangeKind::kDied, now);
  if (!removed.ok() || !*removed) return;
  // ASYNC: the restore step is only the cut of the last change of the server count, which a
  // replacement without a checkpoint of its own under the new count re-cuts (OwnRestoreStep).
  fleet_.Vacate(rank, now, /*keep_restore_step=*/options_.job.mode() != SYNC);
  CountLeasesLocked(leases_->SetServerCounts(rank, false), deferred);
  LOG(WARNING) << "server " << rank << " died (" << reason << "); waiting up to "
               << absl::FormatDuration(options_.server_recovery_timeout) << " for a server to take its rank; "
               << MembershipLine();
  PublishParticipantsLocked(deferred);
}

absl::Status Scheduler::ReportCheckpoints(const CheckpointReport& report) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == FAILED) return JobFailedError();
    const int rank = report.server_rank();
    if (absl::Status s = CheckLive(SERVER, rank, "checkpoint report"); !s.ok()) return s;
    if (absl::Status s = ServerFleet::CheckReport(report); !s.ok()) return s;
    if (OutsideMapLocked(rank)) return absl::OkStatus();  // no shard: its files are not of the job's map
    fleet_.SetCheckpoints(fleet_.WithoutAbandonedSteps(report, server_reports_.StoreEpoch(rank)));
    AdvanceScalingLocked(&deferred);
    VLOG(1) << "server " << rank << " holds checkpoints of steps [" << absl::StrJoin(fleet_.checkpoints(rank), ", ")
            << "]";
    SaveLocked(&deferred);
  }
  return Run(std::move(deferred));
}

int64_t Scheduler::CheckpointsKeptFrom() const {
  absl::MutexLock lock(&mu_);
  if (options_.job.checkpoint_dir().empty()) return -1;
  if (options_.job.mode() != SYNC) return fleet_.AsyncKeepFrom();
  return fleet_.RestorableStep();
}

absl::Status Scheduler::ReportSlowStep(const SlowStepReport& report) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckLive(SERVER, report.server_rank(), "slow-step report"); !s.ok()) return s;
  if (report.step() < 0 || report.waited_ms() < 0 || report.typical_ms() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("slow-step report from server ", report.server_rank(), ": step ",
                                                   report.step(), ", waited ", report.waited_ms(), " ms, typical ",
                                                   report.typical_ms(), " ms; expected >= 0"));
  }
  if (report.waiting_for_size() > kMaxWaitingFor) {
    return absl::InvalidArgumentError(absl::StrCat("slow-step report from server ", report.server_rank(), ": ",
                                                   report.waiting_for_size(), " workers waited for, the limit is ",
                                                   kMaxWaitingFor));
  }
  const absl::Time now = Now();
  if (options_.job.mode() == SYNC) {
    // Kept for the hold-up rule (EvictHoldUpsLocked): the wait began at the step's first push.
    const absl::Time since = now - absl::Milliseconds(report.waited_ms());
    for (int rank : report.waiting_for()) {
      if (!membership_.is_live(WORKER, rank)) continue;
      auto [it, added] = slow_waits_.try_emplace(rank, SlowWait{report.step(), since});
      if (!added && it->second.step != report.step()) it->second = SlowWait{report.step(), since};
      if (!added && it->second.step == report.step()) it->second.since = std::min(it->second.since, since);
    }
  }
  std::vector<std::string> whom;
  for (int rank : report.waiting_for()) {
    std::string who = membership_.Describe(WORKER, rank);
    const std::optional<absl::Duration> silent = membership_.SinceHeartbeat(WORKER, rank, now);
    if (!membership_.is_live(WORKER, rank)) {
      absl::StrAppend(&who, " (no longer live)");
    } else if (silent.has_value()) {
      absl::StrAppendFormat(&who, " (last heartbeat %.1f s ago)", absl::ToDoubleSeconds(*silent));
    }
    whom.push_back(std::move(who));
  }
  LOG(WARNING) << "slow sync step " << report.step() << ": server " << report.server_rank() << " has waited "
               << absl::StrFormat("%.1f s", report.waited_ms() / 1e3) << " (steps usually wait "
               << absl::StrFormat("%.3f s", report.typical_ms() / 1e3) << ") for "
               << (whom.empty() ? "no worker" : absl::StrJoin(whom, ", "));
  server_reports_.AddSlowStep(report, now);
  return absl::OkStatus();
}

}  // namespace scheduler
}  // namespace pstrain
