// ParameterStore, part three: membership. Which workers are live at which membership epoch, the
// fencing of requests by epoch, and what a move to a new epoch does to each mode's state.
#include "server/parameter_store.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain::server {

absl::Status ParameterStore::CheckRanks(absl::string_view what, std::vector<int>* ranks) {
  std::sort(ranks->begin(), ranks->end());
  for (size_t i = 0; i < ranks->size(); ++i) {
    if ((*ranks)[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", (*ranks)[i], " is negative, expected >= 0"));
    }
    if (i > 0 && (*ranks)[i] == (*ranks)[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", (*ranks)[i], " appears twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::CheckShardMap(absl::string_view what, int worker_rank, int64_t shard_map_version) const {
  // Unstamped (0) requests are from callers that predate shard-map epochs: fine while the job is on
  // its first map, when no other routing can exist.
  const bool unstamped_ok = shard_map_version == 0 && shard_map_version_ <= 1;
  if (shard_map_version == shard_map_version_ || unstamped_ok) return absl::OkStatus();
  // ABORTED, as for another membership epoch: the worker fetches the view and routes again (or,
  // ahead of this server, retries shortly).
  return absl::AbortedError(absl::StrCat(what, " from worker ", worker_rank, " was routed under shard map version ",
                                         shard_map_version, "; server ", rank_, " serves version ", shard_map_version_,
                                         "; fetch the cluster view and route again"));
}

absl::Status ParameterStore::CheckLive(absl::string_view what, int worker_rank, int64_t membership_epoch,
                                       int64_t shard_map_version) const {
  if (shutting_down_) return absl::UnavailableError(absl::StrCat("server ", rank_, " shutting down"));
  RETURN_IF_ERROR(CheckShardMap(what, worker_rank, shard_map_version));
  if (membership_epoch < membership_epoch_) {
    return absl::AbortedError(absl::StrCat(what, " from worker ", worker_rank, " carries membership epoch ",
                                           membership_epoch, ", current is ", membership_epoch_));
  }
  if (membership_epoch > membership_epoch_) {
    // The scheduler bumped the epoch and the worker heard first; the server hears within a
    // heartbeat.
    return absl::AbortedError(absl::StrCat("server ", rank_, " is at membership epoch ", membership_epoch_, ", the ",
                                           what, " carries ", membership_epoch, "; retry shortly"));
  }
  if (workers_.find(worker_rank) == workers_.end()) return NotLiveError(what, worker_rank);
  return absl::OkStatus();
}

absl::Status ParameterStore::NotLiveError(absl::string_view what, int worker_rank) const {
  return absl::AbortedError(absl::StrCat(what, " rejected by server ", rank_, ": worker ", worker_rank,
                                         " is not a live member at membership epoch ", membership_epoch_));
}

std::string ParameterStore::InstallMembershipLocked(int64_t epoch, const std::vector<int>& live_worker_ranks) {
  // SSP: a joiner starts level with the slowest live worker still in the data epoch.
  ssp_.SetLive(live_worker_ranks);
  if (mode_ == SYNC) sync_.SetLive(live_worker_ranks);
  std::map<int, LastPush> next;
  std::vector<int> joined, left;
  for (int r : live_worker_ranks) {
    auto it = workers_.find(r);
    if (it != workers_.end()) {
      next.emplace(r, it->second);
      workers_.erase(it);
    } else {
      next.emplace(r, LastPush());
      joined.push_back(r);
    }
  }
  for (const auto& [r, w] : workers_) left.push_back(r);
  workers_ = std::move(next);
  membership_epoch_ = epoch;
  return absl::StrCat(" (joined [", absl::StrJoin(joined, ", "), "], left [", absl::StrJoin(left, ", "), "])");
}

absl::Status ParameterStore::UpdateMembership(int64_t epoch, std::vector<int> live_worker_ranks) {
  RETURN_IF_ERROR(
      CheckRanks(absl::StrCat("server ", rank_, ": membership epoch ", epoch, " live workers"), &live_worker_ranks));
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError(absl::StrCat("server ", rank_, " shutting down"));
    if (epoch <= membership_epoch_) return absl::OkStatus();

    std::string dropped;
    if (mode_ == SYNC) {
      // Half a step's gradients were computed under the old split of the global batch; the live
      // workers of the new epoch recompute all of it, so nothing stored may be mixed in.
      if (sync_.num_pushed() > 0 || !waiters_.empty()) {
        dropped = absl::StrCat("; dropped step ", step_, " (", sync_.num_pushed(), " of ", workers_.size(), " pushed, ",
                               waiters_.size(), " parked calls)");
      }
      const absl::Status aborted =
          absl::AbortedError(absl::StrCat("server ", rank_, " moved to membership epoch ", epoch, " while step ", step_,
                                          " was unfinished; recompute it"));
      for (Waiter& w : waiters_) out.push_back({std::move(w.done), aborted});
      waiters_.clear();
      sync_.Drop();
    }

    const std::string changes = InstallMembershipLocked(epoch, live_worker_ranks);
    // SSP: removed workers no longer hold pulls back. (SYNC has no waiters left; ASYNC never parks.)
    ReleaseReadyLocked(&out);
    LOG(INFO) << "server " << rank_ << ": membership epoch " << epoch << ", live workers ["
              << absl::StrJoin(live_worker_ranks, ", ") << "]" << changes << dropped;
  }
  Run(&out);
  return absl::OkStatus();
}

absl::Status ParameterStore::RestoreAndUpdateMembership(const ShardCheckpoint* ckpt, int64_t epoch,
                                                        std::vector<int> live_worker_ranks) {
  RETURN_IF_ERROR(
      CheckRanks(absl::StrCat("server ", rank_, ": membership epoch ", epoch, " live workers"), &live_worker_ranks));
  if (ckpt == nullptr) {
    if (initial_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("rolling server ", rank_, " back to its initial state: none was kept (checkpointing is off)"));
    }
    ckpt = initial_.get();
  }
  ASSIGN_OR_RETURN(PreparedParts prepared, PrepareCheckpoint(*ckpt));
  Completions out;
  std::string changes, dropped;
  // write_mu_ first: no checkpoint of the abandoned run is being written while the files are
  // pruned below, and none starts afterwards (rollbacks_ changes).
  std::vector<int64_t> removed;
  {
    absl::MutexLock write_lock(&write_mu_);
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) return absl::UnavailableError(absl::StrCat("server ", rank_, " shutting down"));
      if (epoch < membership_epoch_) {
        return absl::FailedPreconditionError(absl::StrCat("rolling server ", rank_, " back to step ", ckpt->step,
                                                          " at membership epoch ", epoch, ": the store is at epoch ",
                                                          membership_epoch_, " already"));
      }
      if (sync_.num_pushed() > 0 || !waiters_.empty()) {
        dropped = absl::StrCat("; dropped step ", step_, " (", sync_.num_pushed(), " of ", workers_.size(), " pushed, ",
                               waiters_.size(), " parked calls)");
      }
      const absl::Status aborted =
          absl::AbortedError(absl::StrCat("server ", rank_, " rolled back to step ", ckpt->step,
                                          " at membership epoch ", epoch, "; step ", step_, " is void"));
      for (Waiter& w : waiters_) out.push_back({std::move(w.done), aborted});
      waiters_.clear();
      if (mode_ == SYNC) sync_.Drop();
      changes = InstallMembershipLocked(epoch, live_worker_ranks);
      InstallCheckpointLocked(*ckpt, std::move(prepared));
      async_.ForgetBatches();
      // SSP (a replacement server in async recovery): the workers' clocks are not in the
      // checkpoint; each is learnt from the worker's next push, and until then holds nobody back.
      if (mode_ == SSP) ssp_.ForgetClocks();
      rollbacks_.fetch_add(1);
    }
    if (!checkpoint_dir_.empty()) {
      for (int64_t s : ListCheckpointSteps(checkpoint_dir_, rank_)) {
        if (s <= ckpt->step) continue;
        const std::string path = CheckpointPath(checkpoint_dir_, rank_, s);
        std::error_code ec;
        if (std::filesystem::remove(path, ec)) {
          removed.push_back(s);
        } else if (ec) {
          LOG(WARNING) << "server " << rank_ << ": cannot remove checkpoint '" << path
                       << "' of the abandoned run: " << ec.message();
        }
      }
    }
  }
  LOG(INFO) << "server " << rank_ << ": rolled back to step " << ckpt->step
            << (ckpt == initial_.get() ? " (initial state)" : " from a checkpoint") << " at membership epoch " << epoch
            << ", live workers [" << absl::StrJoin(live_worker_ranks, ", ") << "]" << changes << dropped
            << (removed.empty() ? ""
                                : absl::StrCat("; removed checkpoints of steps [", absl::StrJoin(removed, ", "), "]"));
  Run(&out);
  return absl::OkStatus();
}

int64_t ParameterStore::membership_epoch() const {
  absl::MutexLock lock(&mu_);
  return membership_epoch_;
}

}  // namespace pstrain::server
