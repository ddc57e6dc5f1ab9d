// Scheduler, part three: changing the server count while the job trains (ServerScaling,
// docs/design/resharding.md). An operator's request, the added servers' registrations, the wait
// for a consistent checkpoint cut, and the cut-over: a new shard map, published with the cut for
// every server to restore re-sharded (ClusterView.restore_step and restore_servers) and for the
// workers to rewind to. Everything here runs under mu_ or takes it; see scheduler.h.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"
#include "scheduler/shard_map.h"

namespace pstrain {
namespace scheduler {

absl::StatusOr<ScaleResponse> Scheduler::Scale(const ScaleRequest& request) {
  Deferred deferred;
  ScaleResponse response;
  {
    absl::MutexLock lock(&mu_);
    if (request.cancel()) {
      const std::optional<ServerScaling::Pending>& pending = scaling_.pending();
      if (!pending.has_value()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cancel: no change of the server count is pending (the job has ", ServersLocked(), " servers)"));
      }
      response.set_plan(absl::StrCat("cancelled ", ServerScaling::Describe(pending->from, pending->to),
                                     "; the job stays at ", pending->from, " servers"));
      CancelScalingLocked("an operator cancelled it", &deferred);
    } else {
      ASSIGN_OR_RETURN(std::string plan, RequestScalingLocked(request.servers(), "an operator", &deferred));
      response.set_plan(std::move(plan));
    }
    response.set_shard_map_version(membership_.shard_map().version());
    SaveLocked(&deferred);
  }
  if (absl::Status saved = Run(std::move(deferred)); !saved.ok()) return saved;
  return response;
}

absl::Status Scheduler::DrainServerLocked(int rank, absl::string_view reason, Deferred* deferred) {
  const int from = ServersLocked();
  const std::string what = absl::StrCat("server ", rank, " asks to be drained (", reason, ")");
  if (const std::optional<ServerScaling::Pending>& pending = scaling_.pending();
      pending.has_value() && pending->to <= rank) {
    LOG(INFO) << what << ": the pending " << ServerScaling::Describe(pending->from, pending->to) << " drains it";
    return absl::OkStatus();
  }
  if (from == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": it is the job's last server; its shard would have nowhere to go"));
  }
  if (rank != from - 1) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": a scale-down drains the highest ranks, and the job's ",
                                                      from, " servers are ranks 0..", from - 1, "; expected server ",
                                                      from - 1, " (pstrain-ctl scale drains any number)"));
  }
  // RequestScalingLocked logs "<who> asked for N servers: <plan>".
  return RequestScalingLocked(from - 1, absl::StrCat("server ", rank, " (", reason, ")"), deferred).status();
}

absl::StatusOr<std::string> Scheduler::RequestScalingLocked(int to, absl::string_view who, Deferred* deferred) {
  const std::string what = absl::StrCat("scale to ", to, " servers");
  if (state_ != RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the job is ", JobState_Name(state_), "; a running job changes its server count"));
  }
  if (options_.job.mode() != SYNC && fleet_.replicated()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the job is ", Mode_Name(options_.job.mode()),
                     " with replicas (--replicas=2), whose copies "
                     "never cut; an ASYNC or SSP job with replicas does not change its server count yet"));
  }
  if (!CheckpointsOn(options_.job)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what,
                     ": the job writes no checkpoints; the servers move to the new count through a checkpoint cut "
                     "(--checkpoint_dir with --checkpoint_every_steps or --checkpoint_every_seconds)"));
  }
  if (fleet_.replicated() && to == 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": the job keeps replicas (--replicas=2), whose copy of a shard lives on another server; "
                     "expected at least 2 servers"));
  }
  if (fleet_.Degraded()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": a shard has lost its copy (", fleet_.HostsLine(),
                     "); the servers move to a new count with both copies of every shard"));
  }
  if (!fleet_.vacancies().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": a dead server is being replaced; ask again once every rank is live"));
  }
  const int from = ServersLocked();
  RETURN_IF_ERROR(scaling_.Request(to, from, Now()));
  const std::string cut = options_.job.mode() == SYNC
                              ? "the next checkpoint cut"
                              : "a quiet cut (no fresh lease goes out until every one out is complete)";
  std::string plan;
  if (to > from) {
    membership_.SetServerSlots(to);
    plan = absl::StrCat(ServerScaling::Describe(from, to), ": waiting for ", to - from,
                        to - from == 1 ? " server" : " servers", " to register (ranks ", from, "..", to - 1,
                        "), then the cut-over at ", cut);
  } else {
    plan = absl::StrCat(ServerScaling::Describe(from, to), ": the cut-over at ", cut, "; servers ", to, "..", from - 1,
                        " are drained");
  }
  LOG(INFO) << who << " asked for " << to << " servers: " << plan;
  AdvanceScalingLocked(deferred);
  return plan;
}

bool Scheduler::GrowsForLocked(const RegisterRequest& request) const {
  return request.role() == SERVER && state_ == RUNNING && options_.job.max_servers() > ServersLocked() &&
         !scaling_.pending().has_value() && fleet_.vacancies().empty() &&
         // Every rank of the map live and none outside it (a drained server that has not left yet
         // keeps the next one waiting: the growth could not admit it).
         membership_.num_live(SERVER) == ServersLocked() &&
         !membership_.Lookup(SERVER, request.address(), request.instance_id()).has_value();
}

void Scheduler::AdvanceScalingLocked(Deferred* deferred) {
  const std::optional<ServerScaling::Pending>& pending = scaling_.pending();
  if (!pending.has_value() || Ended()) return;
  if (!pending->after_cut.has_value()) {
    for (int rank = pending->from; rank < pending->to; ++rank) {
      if (!membership_.is_live(SERVER, rank)) return;
    }
    scaling_.Ready(fleet_.NewestCommonStep(), Now());
    if (options_.job.mode() == SYNC) {
      LOG(INFO) << ServerScaling::Describe(pending->from, pending->to) << ": ready; cutting over at the first "
                << "checkpoint cut after step " << *scaling_.pending()->after_cut;
    } else {
      LOG(INFO) << ServerScaling::Describe(pending->from, pending->to) << ": ready; no fresh training lease goes "
                << "out until the cut-over, which is at the quiet cut once the " << leases_->num_incomplete()
                << " leases out are complete";
    }
  }
  // ASYNC servers cut on their own clocks: only the quiet cut is common to them.
  if (options_.job.mode() != SYNC && !AdvanceQuietCutLocked(deferred)) return;
  const int64_t cut = fleet_.NewestCommonStep();
  if (fleet_.vacancies().empty() && scaling_.DueAt(cut)) CutOverLocked(cut, deferred);
}

bool Scheduler::HoldsFreshLeasesLocked() const {
  if (options_.job.mode() == SYNC) return false;
  if (scaling_.pending().has_value() && scaling_.pending()->after_cut.has_value()) return true;
  // After the cut-over (also while a next change, asked for meanwhile, is not ready yet), until
  // every server of the new map serves it: a server of the old map that has not learnt of it yet
  // would apply a fresh lease's batches to the store it is about to retire, and confirm them (each
  // server of the new map reports its re-cut once it serves, and those reports are saved; a
  // replacement for one that died first restores without one).
  if (scaling_.done().empty()) return false;
  const ServerScaling::Done& last = scaling_.done().back();
  return last.shard_map_version == membership_.shard_map().version() &&
         static_cast<int>(last.resharded.size()) < last.to && !MapRestoredLocked();
}

int64_t Scheduler::QuietCutForLocked(const HeartbeatRequest& beat, Deferred* deferred) {
  if (!scaling_.pending().has_value()) return 0;
  // A confirmation in this heartbeat may have completed the last lease the quiet cut waits for.
  AdvanceScalingLocked(deferred);
  if (!scaling_.pending().has_value() || !scaling_.pending()->quiet_cut.has_value()) return 0;
  // Asked of a server whose store serves the map (see AdvanceQuietCutLocked).
  if (OutsideMapLocked(beat.rank()) || beat.restoring() || beat.store_epoch() < fleet_.restore_epoch()) return 0;
  return *scaling_.pending()->quiet_cut;
}

bool Scheduler::AdvanceQuietCutLocked(Deferred* deferred) {
  const ServerScaling::Pending& pending = *scaling_.pending();
  if (leases_->num_incomplete() > 0) {
    // (None goes out under the hold; the cut-over needs every one complete: LeasePool::SetNumServers.)
    VLOG(1) << ServerScaling::Describe(pending.from, pending.to) << ": waiting for " << leases_->num_incomplete()
            << " training leases to complete before the quiet cut";
    return false;
  }
  // Every server of the map serves it (a change just before this one has been restored): its step
  // is known, and the checkpoint it writes is reported by a server whose store the scheduler knows
  // serves the map (a report from one still restoring loses the steps after the restore step).
  if (!pending.quiet_cut.has_value() && !MapRestoredLocked()) return false;
  // Beyond every step a server of the map said or checkpointed: no server holds a file of it, and
  // none has applied an update past it. A step reported later than the request is a server that
  // moved on after all (an update without a lease): it is asked again, higher.
  int64_t beyond = 0;
  for (int rank = 0; rank < ServersLocked(); ++rank) {
    beyond = std::max({beyond, server_reports_.StoreStep(rank), fleet_.NewestCheckpoint(rank)});
  }
  if (!pending.quiet_cut.has_value() || beyond > *pending.quiet_cut) {
    scaling_.QuietCut(beyond + 1);
    LOG(INFO) << ServerScaling::Describe(pending.from, pending.to) << ": every training lease is complete and "
              << "none goes out meanwhile; every server checkpoints step " << beyond + 1 << ", the quiet cut";
    SaveLocked(deferred);
  }
  return true;
}

void Scheduler::CutOverLocked(int64_t step, Deferred* deferred) {
  const int from = scaling_.pending()->from;
  const int to = scaling_.pending()->to;
  const std::string what = absl::StrCat(ServerScaling::Describe(from, to), " at the cut of step ", step);
  const ShardMap& old_map = membership_.shard_map();
  absl::StatusOr<ShardMap> map =
      BuildShardMap({old_map.tensors().begin(), old_map.tensors().end()}, to, options_.job.max_chunk_bytes());
  absl::Status status = map.status();
  if (status.ok() && options_.record_server_count) status = options_.record_server_count(step, to);
  if (!status.ok()) {
    CancelScalingLocked(absl::StrCat("the cut-over at step ", step, " failed: ", status.ToString()), deferred);
    return;
  }
  map->set_version(old_map.version() + 1);
  const int64_t version = map->version();
  membership_.SetServerSlots(to);
  membership_.ChangeShardMap(*std::move(map));
  fleet_.Resize(to);
  fleet_.SetResumeCut(step, from);
  fleet_.SetRestoreStep(step, membership_.epoch());
  if (options_.job.mode() == SYNC) {
    progress_->AllowRedo();  // The workers redo the steps after the cut.
  } else {
    // A quiet cut: every lease is complete, on every server of the old map; the new map's confirm
    // from here on, and the workers redo nothing.
    leases_->SetNumServers(to);
  }
  final_model_ = FinalModelAssembly(to);
  scaling_.CutOver(step, version, Now());
  LOG(INFO) << what << ": shard map version " << version << ", every server restores the cut re-sharded "
            << "(restore_step " << step << ", restore_servers " << from << ", membership epoch " << membership_.epoch()
            << ")" << (fleet_.replicated() ? absl::StrCat("; ", fleet_.HostsLine()) : std::string()) << "; "
            << MembershipLine();
  PublishParticipantsLocked(deferred);
  // Before anyone sees the new map: the servers re-shard as soon as they do.
  SaveNowLocked();
}

void Scheduler::CancelScalingLocked(absl::string_view why, Deferred* deferred) {
  const ServerScaling::Pending pending = *scaling_.pending();
  scaling_.Abandon();
  membership_.SetServerSlots(ServersLocked());
  std::vector<int> dropped;
  for (int rank = ServersLocked(); rank < pending.to; ++rank) {
    absl::StatusOr<bool> removed = membership_.Remove(SERVER, rank, ChangeKind::kLeft, Now());
    if (removed.ok() && *removed) dropped.push_back(rank);
  }
  LOG(WARNING) << ServerScaling::Describe(pending.from, pending.to) << ": cancelled (" << why << "); the job stays at "
               << ServersLocked() << " servers"
               << (dropped.empty()
                       ? std::string()
                       : absl::StrCat("; dropped the added servers [", absl::StrJoin(dropped, ", "), "], which exit"))
               << "; " << MembershipLine();
  PublishParticipantsLocked(deferred);
}

void Scheduler::CancelLateScalingLocked(absl::Time now, Deferred* deferred) {
  const std::optional<ServerScaling::Pending>& pending = scaling_.pending();
  if (pending.has_value() && pending->after_cut.has_value() && HoldsFreshLeasesLocked() &&
      now - pending->ready > options_.server_recovery_timeout) {
    // ASYNC/SSP: the hold on fresh leases stops the job's training; a quiet cut that does not
    // become common in time (a lease out that does not complete, a server that cannot write its
    // checkpoint) must not stop it for good.
    CancelScalingLocked(absl::StrCat("no quiet cut was common to every server within ",
                                     absl::FormatDuration(options_.server_recovery_timeout),
                                     " (--server_recovery_timeout_ms) of its readiness; ", leases_->num_incomplete(),
                                     " training leases were incomplete; fresh leases go out again"),
                        deferred);
    SaveLocked(deferred);
    return;
  }
  if (!pending.has_value() || pending->after_cut.has_value() || pending->to <= pending->from) return;
  if (now - pending->requested <= options_.server_recovery_timeout) return;
  int missing = 0;
  for (int rank = pending->from; rank < pending->to; ++rank) missing += membership_.is_live(SERVER, rank) ? 0 : 1;
  CancelScalingLocked(
      absl::StrCat(missing, " of the ", pending->to - pending->from, " added servers did not register within ",
                   absl::FormatDuration(options_.server_recovery_timeout), " (--server_recovery_timeout_ms)"),
      deferred);
  SaveLocked(deferred);
}

void Scheduler::RemoveOutsideServerLocked(int rank, ChangeKind kind, absl::string_view reason, Deferred* deferred) {
  absl::StatusOr<bool> removed = membership_.Remove(SERVER, rank, kind, Now());
  if (!removed.ok() || !*removed) return;
  const std::optional<ServerScaling::Pending>& pending = scaling_.pending();
  const bool counted = pending.has_value() && rank < pending->to;
  LOG(INFO) << "server " << rank << " " << ChangeKindName(kind) << " (" << reason << "); it was outside the shard map"
            << (counted ? absl::StrCat("; the change ", ServerScaling::Describe(pending->from, pending->to),
                                       " waits for another server to take its rank")
                        : std::string())
            << "; " << MembershipLine();
  if (counted) scaling_.Unready();
  PublishParticipantsLocked(deferred);
}

std::vector<ServerCountChangeStatus> Scheduler::ServerCountChangesLocked() const {
  std::vector<ServerCountChangeStatus> out;
  for (const ServerScaling::Done& d : scaling_.done()) {
    ServerCountChangeStatus& c = out.emplace_back();
    c.from = d.from;
    c.to = d.to;
    c.step = d.step;
    c.shard_map_version = d.shard_map_version;
    c.requested_seconds = absl::ToDoubleSeconds(d.requested - created_);
    c.cut_over_seconds = absl::ToDoubleSeconds(d.cut_over - created_);
    for (const auto& [rank, r] : d.resharded) {
      ++c.servers_reported;
      c.max_pause_ms = std::max(c.max_pause_ms, r.pause_ms());
      c.rows += r.rows();
      c.rows_moved += r.rows_moved();
      c.bytes += r.bytes();
      c.bytes_moved += r.bytes_moved();
    }
  }
  if (const std::optional<ServerScaling::Pending>& p = scaling_.pending(); p.has_value()) {
    ServerCountChangeStatus pending;
    pending.from = p->from;
    pending.to = p->to;
    pending.requested_seconds = absl::ToDoubleSeconds(p->requested - created_);
    out.push_back(pending);
  }
  return out;
}

}  // namespace scheduler
}  // namespace pstrain
