// The Scheduler's read-only views for the dashboard's JSON API and the metrics: copies of the
// state, taken under the mutex and formatted elsewhere (status_json.h).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {
namespace {

// The dashboard's names of the job states.
std::string StateName(JobState state) {
  switch (state) {
    case RUNNING:
      return "RUNNING";
    case FINISHED:
      return "FINISHED";
    case FAILED:
      return "FAILED";
    default:
      return "WAITING";
  }
}

}  // namespace

scheduler::DashboardStatus Scheduler::DashboardStatus() const {
  scheduler::DashboardStatus out;
  absl::MutexLock lock(&mu_);
  const absl::Time now = Now();
  out.state = StateName(state_);
  if (state_ == FAILED) out.failure = std::string(failure_.message());
  out.mode = ModeName(options_.job.mode());
  out.now_seconds = absl::ToDoubleSeconds(now - created_);
  out.membership_epoch = membership_.epoch();
  out.shard_map_version = membership_.shard_map().version();
  out.map_servers = ServersLocked();
  out.server_count_changes = ServerCountChangesLocked();
  progress_->FillStatus(now, &out);
  out.training_leases_out = leases_->num_out();
  out.eval_leases_out = progress_->eval_leases_out();
  out.barriers_waiting = static_cast<int>(barriers_.PendingBarriers().size());
  out.members = membership_.Members(now, created_);
  server_reports_.FillDashboard(&out);
  for (const MembershipEvent& e : membership_.events()) {
    out.membership_events.push_back(MembershipEventStatus{absl::ToDoubleSeconds(e.at - created_), RoleName(e.role),
                                                          e.rank, ChangeKindName(e.kind)});
  }
  out.stuck_barriers = StuckBarriersLocked(now);
  if (stream_.has_value()) out.stream = StreamStatusLocked(kDashboardStreamFiles);
  return out;
}

std::vector<StuckBarrierStatus> Scheduler::StuckBarriersLocked(absl::Time now) const {
  std::vector<BarrierSet::Pending> pending = barriers_.PendingBarriers();
  if (epoch_end_waiting_since_.has_value() && leases_ != nullptr) {
    // The end of an async/SSP epoch waiting for leases still out is a barrier of the holders.
    BarrierSet::Pending leases{
        absl::StrCat("epoch-", leases_->current_epoch(), "-leases"), *epoch_end_waiting_since_, {}};
    for (int rank : leases_->EpochEndWaitsFor()) leases.missing.push_back(absl::StrCat("worker ", rank));
    if (!leases.missing.empty()) pending.push_back(std::move(leases));
  }
  if (pending.empty()) return {};
  // Barrier keys are "<role> <rank>" (PublishParticipantsLocked).
  std::map<std::string, MemberStatus> by_key;
  for (MemberStatus& m : membership_.Members(now, created_)) {
    std::string key = absl::StrCat(m.role, " ", m.rank);
    by_key.emplace(std::move(key), std::move(m));
  }
  return FindStuckBarriers(pending, now, created_, options_.stuck_barrier_after, [&](const std::string& key) {
    MissingParticipant p;
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      p.role = key;  // Not a member key: show it as it is.
      return p;
    }
    p.role = it->second.role;
    p.rank = it->second.rank;
    p.address = it->second.address;
    p.last_heartbeat_seconds_ago = it->second.last_heartbeat_seconds_ago;
    return p;
  });
}

std::vector<TimelinePoint> Scheduler::TimelineSince(int64_t since, size_t max_points, int64_t* next) const {
  absl::MutexLock lock(&mu_);
  return progress_->TimelineSince(since, max_points, next);
}

std::vector<MetricsTarget> Scheduler::MetricsTargets() const {
  std::vector<MemberStatus> members;
  {
    absl::MutexLock lock(&mu_);
    members = membership_.Members(Now(), created_);
  }
  std::vector<MetricsTarget> out;
  for (const MemberStatus& m : members) {
    if (m.state != "live" || m.metrics_address.empty()) continue;
    out.push_back(MetricsTarget{m.metrics_address, {{"role", m.role}, {"rank", absl::StrCat(m.rank)}}});
  }
  return out;
}

}  // namespace scheduler
}  // namespace pstrain
