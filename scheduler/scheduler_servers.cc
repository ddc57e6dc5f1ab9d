// Scheduler, part two: the servers. Their death (a vacant rank waiting for a replacement, or a
// replica promoted), the checkpoint lists the recovery picks a restore step from, and the slow
// steps they report. Everything here runs under mu_ or takes it; see scheduler.h.
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

int64_t NewestCommonStep(const std::vector<std::vector<int64_t>>& steps_by_server) {
  if (steps_by_server.empty()) return 0;
  const std::vector<int64_t>& first = steps_by_server.front();
  for (auto step = first.rbegin(); step != first.rend(); ++step) {
    const bool everywhere = std::all_of(
        steps_by_server.begin() + 1, steps_by_server.end(),
        [&](const std::vector<int64_t>& steps) { return std::binary_search(steps.begin(), steps.end(), *step); });
    if (everywhere) return *step;
  }
  return 0;
}

bool Scheduler::RecoversServersLocked() const {
  return state_ == RUNNING && CheckpointsOn(options_.job);
}

bool Scheduler::PromotesReplicasLocked() const { return state_ == RUNNING && !shard_hosts_.empty(); }

std::string Scheduler::ShardHostsLine() const {
  std::vector<std::string> parts;
  for (const ShardHost& h : shard_hosts_) {
    parts.push_back(absl::StrCat("shard ", h.shard(), " on server ", h.primary(),
                                 h.has_backup() ? absl::StrCat(", copy on ", h.backup()) : ", no copy"));
  }
  return absl::StrJoin(parts, "; ");
}

void Scheduler::PromoteReplicasLocked(int rank, absl::string_view reason, Deferred* deferred) {
  if (Ended()) return;
  std::vector<int> lost;
  for (const ShardHost& h : shard_hosts_) {
    if (h.primary() == rank && !h.has_backup()) lost.push_back(h.shard());
  }
  if (!lost.empty()) {
    EndLocked(FAILED,
              absl::UnavailableError(absl::StrCat(
                  reason, "; server ", rank, " held the only copy of shard ", absl::StrJoin(lost, ", "),
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
  for (ShardHost& h : shard_hosts_) {
    if (h.primary() == rank) {
      h.set_primary(h.backup());
      h.clear_backup();
    } else if (h.has_backup() && h.backup() == rank) {
      h.clear_backup();
    }
  }
  LOG(WARNING) << "server " << rank << " died (" << reason << "); its shard's copy is promoted, no rollback ("
               << ShardHostsLine() << "); " << MembershipLine();
  PublishParticipantsLocked(deferred);
}

void Scheduler::RemoveServerLocked(int rank, absl::string_view reason, Deferred* deferred) {
  if (PromotesReplicasLocked()) {
    PromoteReplicasLocked(rank, reason, deferred);
    return;
  }
  if (FailForLostFinalShardLocked(rank, reason, deferred)) return;
  const absl::Time now = Now();
  absl::StatusOr<bool> removed = membership_.Remove(SERVER, rank, ChangeKind::kDied, now);
  if (!removed.ok() || !*removed) return;
  vacant_servers_[rank] = now;
  CountLeasesLocked(leases_->SetServerCounts(rank, false), deferred);
  restore_step_.reset();
  LOG(WARNING) << "server " << rank << " died (" << reason << "); waiting up to "
               << absl::FormatDuration(options_.server_recovery_timeout)
               << " for a server to take its rank; " << MembershipLine();
  PublishParticipantsLocked(deferred);
}

absl::Status Scheduler::ReportCheckpoints(const CheckpointReport& report) {
  Deferred deferred;
  {
  absl::MutexLock lock(&mu_);
  if (state_ == FAILED) return JobFailedError();
  const int rank = report.server_rank();
  if (absl::Status s = CheckLive(SERVER, rank, "checkpoint report"); !s.ok()) return s;
  if (report.steps_size() > kMaxCheckpointSteps) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint report from server ", rank, ": ", report.steps_size(),
                                                   " steps, the limit is ", kMaxCheckpointSteps));
  }
  for (int i = 0; i < report.steps_size(); ++i) {
    if (report.steps(i) < 0 || (i > 0 && report.steps(i) <= report.steps(i - 1))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint report from server ", rank, ": step ", report.steps(i), " at index ", i,
          i > 0 ? absl::StrCat(" after ", report.steps(i - 1)) : std::string(),
          ", expected strictly ascending steps >= 0"));
    }
  }
  checkpoints_[rank].assign(report.steps().begin(), report.steps().end());
  VLOG(1) << "server " << rank << " holds checkpoints of steps [" << absl::StrJoin(checkpoints_[rank], ", ")
          << "]";
  SaveLocked(&deferred);
  }
  return Run(std::move(deferred));
}

absl::Status Scheduler::ReportSlowStep(const SlowStepReport& report) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckLive(SERVER, report.server_rank(), "slow-step report"); !s.ok()) return s;
  if (report.step() < 0 || report.waited_ms() < 0 || report.typical_ms() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("slow-step report from server ", report.server_rank(),
                                                   ": step ", report.step(), ", waited ", report.waited_ms(),
                                                   " ms, typical ", report.typical_ms(), " ms; expected >= 0"));
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
  slow_steps_.emplace_back(now, report);
  if (slow_steps_.size() > kMaxSlowSteps) slow_steps_.erase(slow_steps_.begin());
  return absl::OkStatus();
}

}  // namespace scheduler
}  // namespace pstrain
