#include "scheduler/server_fleet.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/member_limits.h"

namespace pstrain {
namespace scheduler {

int64_t NewestCommonStep(const std::vector<std::vector<int64_t>>& steps_by_server, int64_t from) {
  if (steps_by_server.empty()) return 0;
  const std::vector<int64_t>& first = steps_by_server.front();
  for (auto step = first.rbegin(); step != first.rend() && *step >= from; ++step) {
    const bool everywhere = std::all_of(
        steps_by_server.begin() + 1, steps_by_server.end(),
        [&](const std::vector<int64_t>& steps) { return std::binary_search(steps.begin(), steps.end(), *step); });
    if (everywhere) return *step;
  }
  return 0;
}

ServerFleet::ServerFleet(int num_servers, bool replicas) : checkpoints_(num_servers) {
  if (replicas) shard_hosts_ = RingPlacement(num_servers);
}

std::vector<ShardHost> ServerFleet::RingPlacement(int num_servers) {
  std::vector<ShardHost> hosts;
  for (int s = 0; s < num_servers; ++s) {
    ShardHost& host = hosts.emplace_back();
    host.set_shard(s);
    host.set_primary(s);
    host.set_backup((s + 1) % num_servers);
  }
  return hosts;
}

bool ServerFleet::Degraded() const {
  for (const ShardHost& h : shard_hosts_) {
    if (h.primary() != h.shard() || !h.has_backup()) return true;
  }
  return false;
}

int ServerFleet::PrimaryOf(int shard) const {
  if (shard >= 0 && shard < static_cast<int>(shard_hosts_.size())) return shard_hosts_[shard].primary();
  return shard;
}

std::vector<int> ServerFleet::OnlyCopiesOn(int rank) const {
  std::vector<int> shards;
  for (const ShardHost& h : shard_hosts_) {
    if (h.primary() == rank && !h.has_backup()) shards.push_back(h.shard());
  }
  return shards;
}

void ServerFleet::Promote(int rank) {
  for (ShardHost& h : shard_hosts_) {
    if (h.primary() == rank) {
      h.set_primary(h.backup());
      h.clear_backup();
    } else if (h.has_backup() && h.backup() == rank) {
      h.clear_backup();
    }
  }
}

std::string ServerFleet::HostsLine() const {
  std::vector<std::string> parts;
  for (const ShardHost& h : shard_hosts_) {
    parts.push_back(absl::StrCat("shard ", h.shard(), " on server ", h.primary(),
                                 h.has_backup() ? absl::StrCat(", copy on ", h.backup()) : ", no copy"));
  }
  return absl::StrJoin(parts, "; ");
}

absl::Status ServerFleet::CheckReport(const CheckpointReport& report) {
  const int rank = report.server_rank();
  if (report.steps_size() > kMaxCheckpointSteps) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint report from server ", rank, ": ", report.steps_size(),
                                                   " steps, the limit is ", kMaxCheckpointSteps));
  }
  for (int i = 0; i < report.steps_size(); ++i) {
    if (report.steps(i) < 0 || (i > 0 && report.steps(i) <= report.steps(i - 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint report from server ", rank, ": step ", report.steps(i), " at index ", i,
                       i > 0 ? absl::StrCat(" after ", report.steps(i - 1)) : std::string(),
                       ", expected strictly ascending steps >= 0"));
    }
  }
  return absl::OkStatus();
}

void ServerFleet::SetCheckpoints(const CheckpointReport& report) {
  checkpoints_[report.server_rank()].assign(report.steps().begin(), report.steps().end());
}

int64_t ServerFleet::NewestCheckpoint(int rank) const {
  return checkpoints_[rank].empty() ? 0 : checkpoints_[rank].back();
}

int64_t ServerFleet::NewestCommonStep() const {
  // A rank's files of an earlier server count (a rank drained, then added again) are not of this
  // layout: only steps from the resumed cut on count.
  return scheduler::NewestCommonStep(checkpoints_, resume_step_);
}

void ServerFleet::SetResumeCut(int64_t step, int servers) {
  resume_step_ = step;
  resume_servers_ = servers;
}

int64_t ServerFleet::RestorableStep() const { return std::max(NewestCommonStep(), resume_step_); }

void ServerFleet::Vacate(int rank, absl::Time when, bool keep_restore_step) {
  vacancies_[rank] = when;
  if (!keep_restore_step) restore_step_.reset();
}

bool ServerFleet::ResumedOnAnotherCount() const { return resume_servers_ > 0 && resume_servers_ != num_servers(); }

int64_t ServerFleet::OwnRestoreStep(int rank) const {
  if (!ResumedOnAnotherCount()) return NewestCheckpoint(rank);
  const std::vector<int64_t>& steps = checkpoints_[rank];
  return !steps.empty() && steps.back() > resume_step_ ? steps.back() : resume_step_;
}

bool ServerFleet::HasOwnCutSinceResume(bool each_rank) const {
  if (!ResumedOnAnotherCount()) return true;
  if (!each_rank) return NewestCommonStep() > resume_step_;
  return AsyncKeepFrom() < 0;
}

int64_t ServerFleet::AsyncKeepFrom() const {
  if (!ResumedOnAnotherCount()) return -1;
  for (const std::vector<int64_t>& steps : checkpoints_) {
    if (steps.empty() || steps.back() <= resume_step_) return resume_step_;
  }
  return -1;
}

void ServerFleet::Resize(int num_servers) {
  checkpoints_.resize(num_servers);
  vacancies_.erase(vacancies_.lower_bound(num_servers), vacancies_.end());
  if (replicated()) shard_hosts_ = RingPlacement(num_servers);
}

void ServerFleet::Fill(int rank) { vacancies_.erase(rank); }

void ServerFleet::SetRestoreStep(int64_t step, int64_t epoch) {
  restore_step_ = step;
  restore_epoch_ = epoch;
  // Steps after the restore step are of the abandoned run: every server deletes them as it
  // restores, and one that dies first must not leave them to a cut.
  for (std::vector<int64_t>& steps : checkpoints_) {
    steps.erase(std::upper_bound(steps.begin(), steps.end(), step), steps.end());
  }
}

CheckpointReport ServerFleet::WithoutAbandonedSteps(CheckpointReport report, int64_t store_epoch) const {
  if (!restore_step_.has_value() || store_epoch <= 0 || store_epoch >= restore_epoch_) return report;
  auto* steps = report.mutable_steps();
  steps->erase(std::upper_bound(steps->begin(), steps->end(), *restore_step_), steps->end());
  return report;
}

void ServerFleet::AddToView(ClusterView* view) const {
  for (const ShardHost& host : shard_hosts_) *view->add_shard_hosts() = host;
  if (restore_step_.has_value()) {
    view->set_restore_step(*restore_step_);
    view->set_restore_epoch(restore_epoch_);
    if (resume_servers_ > 0 && resume_servers_ != num_servers() && *restore_step_ == resume_step_) {
      view->set_restore_servers(resume_servers_);
    }
  }
}

void ServerFleet::Save(SchedulerState* state) const {
  for (int rank = 0; rank < num_servers(); ++rank) {
    CheckpointReport* out = state->add_checkpoints();
    out->set_server_rank(rank);
    for (int64_t step : checkpoints_[rank]) out->add_steps(step);
  }
  for (const auto& [rank, died] : vacancies_) {
    VacantServerState* out = state->add_vacant_servers();
    out->set_rank(rank);
    out->set_died_us(absl::ToUnixMicros(died));
  }
  if (restore_step_.has_value()) state->set_restore_step(*restore_step_);
  state->set_restore_epoch(restore_epoch_);
  for (const ShardHost& host : shard_hosts_) *state->add_shard_hosts() = host;
  state->set_resume_step(resume_step_);
  state->set_resume_servers(resume_servers_);
}

absl::Status ServerFleet::Restore(const SchedulerState& state) {
  if (state.checkpoints_size() > num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler state: checkpoint lists of ", state.checkpoints_size(),
                                                   " servers, the job has ", num_servers()));
  }
  for (const CheckpointReport& report : state.checkpoints()) {
    if (report.server_rank() < 0 || report.server_rank() >= num_servers()) continue;
    checkpoints_[report.server_rank()].assign(report.steps().begin(), report.steps().end());
  }
  vacancies_.clear();
  for (const VacantServerState& vacant : state.vacant_servers()) {
    vacancies_[vacant.rank()] = absl::FromUnixMicros(vacant.died_us());
  }
  restore_step_.reset();
  if (state.has_restore_step()) restore_step_ = state.restore_step();
  restore_epoch_ = state.restore_epoch();
  if (state.shard_hosts_size() > 0) shard_hosts_.assign(state.shard_hosts().begin(), state.shard_hosts().end());
  if (state.resume_servers() > 0) SetResumeCut(state.resume_step(), state.resume_servers());
  return absl::OkStatus();
}

}  // namespace scheduler
}  // namespace pstrain
