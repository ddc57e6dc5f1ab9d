// Scheduler, part three: changing the server count while the job trains (ServerScaling,
// docs/design/resharding.md). An operator's request, the added servers' registrations, the wait
// for a consistent checkpoint cut, and the cut-over: a new shard map, published with the cut for
// every server to restore re-sharded (ClusterView.restore_step and restore_servers) and for the
// workers to rewind to. Everything here runs under mu_ or takes it; see scheduler.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
    const std::string what = absl::StrCat("scale to ", request.servers(), " servers");
    if (state_ != RUNNING) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the job is ", JobState_Name(state_), "; a running job changes its server count"));
    }
    if (options_.job.mode() != SYNC) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": the job is ", Mode_Name(options_.job.mode()), "; only SYNC jobs change their server count yet"));
    }
    if (!CheckpointsOn(options_.job)) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": the job writes no checkpoints; the servers move to the new count through a checkpoint cut "
                "(--checkpoint_dir with --checkpoint_every_steps or --checkpoint_every_seconds)"));
    }
    if (options_.job.replicas() == 2) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the job keeps replicas (--replicas=2), which do not follow a new count yet"));
    }
    if (!fleet_.vacancies().empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": a dead server is being replaced; ask again once every rank is live"));
    }
    RETURN_IF_ERROR(scaling_.Request(request.servers(), ServersLocked(), Now()));
    const int from = ServersLocked();
    const int to = request.servers();
    if (to > from) {
      membership_.SetServerSlots(to);
      response.set_plan(absl::StrCat(ServerScaling::Describe(from, to), ": waiting for ", to - from,
                                     to - from == 1 ? " server" : " servers", " to register (ranks ", from, "..",
                                     to - 1, "), then the cut-over at the next checkpoint cut"));
    } else {
      response.set_plan(absl::StrCat(ServerScaling::Describe(from, to), ": the cut-over at the next checkpoint cut; ",
                                     "servers ", to, "..", from - 1, " are drained"));
    }
    response.set_shard_map_version(membership_.shard_map().version());
    LOG(INFO) << "an operator asked for " << to << " servers: " << response.plan();
    AdvanceScalingLocked(&deferred);
    SaveLocked(&deferred);
  }
  if (absl::Status saved = Run(std::move(deferred)); !saved.ok()) return saved;
  return response;
}

void Scheduler::AdvanceScalingLocked(Deferred* deferred) {
  const std::optional<ServerScaling::Pending>& pending = scaling_.pending();
  if (!pending.has_value() || Ended()) return;
  if (!pending->after_cut.has_value()) {
    for (int rank = pending->from; rank < pending->to; ++rank) {
      if (!membership_.is_live(SERVER, rank)) return;
    }
    scaling_.Ready(fleet_.NewestCommonStep());
    LOG(INFO) << ServerScaling::Describe(pending->from, pending->to) << ": ready; cutting over at the first checkpoint "
              << "cut after step " << *scaling_.pending()->after_cut;
  }
  const int64_t cut = fleet_.NewestCommonStep();
  if (fleet_.vacancies().empty() && scaling_.DueAt(cut)) CutOverLocked(cut, deferred);
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
    LOG(ERROR) << what << ": abandoned, the job goes on with " << from << " servers: " << status;
    scaling_.Abandon();
    membership_.SetServerSlots(from);
    return;
  }
  map->set_version(old_map.version() + 1);
  const int64_t version = map->version();
  membership_.SetServerSlots(to);
  membership_.ChangeShardMap(*std::move(map));
  fleet_.Resize(to);
  fleet_.SetResumeCut(step, from);
  fleet_.SetRestoreStep(step, membership_.epoch());
  progress_->AllowRedo();  // The workers redo the steps after the cut.
  final_model_ = FinalModelAssembly(to);
  scaling_.CutOver(step, version, Now());
  LOG(INFO) << what << ": shard map version " << version << ", every server restores the cut re-sharded "
            << "(restore_step " << step << ", restore_servers " << from << ", membership epoch " << membership_.epoch()
            << "); " << MembershipLine();
  PublishParticipantsLocked(deferred);
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
    out.push_back({d.from, d.to, d.step, d.shard_map_version, absl::ToDoubleSeconds(d.requested - created_),
                   absl::ToDoubleSeconds(d.cut_over - created_)});
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
