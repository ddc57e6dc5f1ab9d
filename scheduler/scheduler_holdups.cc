// Scheduler, the end of an epoch and the hold-up rule: when an epoch's training is over (so its
// evaluation leases may go out, EpochTrainedLocked), and the eviction of a member that holds the
// others up for longer than its limit, as if it had died, even while it heartbeats
// (EvictHoldUpsLocked). See scheduler.h.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/barriers.h"
#include "data/assignment.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {

int64_t Scheduler::SyncEpochEndStepLocked(int epoch) const {
  // A stream's one epoch ends with the stream: until then no step is its last.
  if (stream_.has_value()) return stream_->ended() ? total_steps_ : std::numeric_limits<int64_t>::max();
  const int64_t per_epoch = data::SyncStepsPerEpoch(train_samples_, options_.job.global_batch());
  return std::min<int64_t>(total_steps_, (static_cast<int64_t>(epoch) + 1) * per_epoch);
}

std::vector<int> Scheduler::SyncLaggingWorkersLocked(int epoch) const {
  const int64_t end = SyncEpochEndStepLocked(epoch);
  std::vector<int> lagging;
  for (int rank : membership_.LiveRanks(WORKER)) {
    const int64_t step = progress_->worker_step(rank);
    if (step > 0 && step < end) lagging.push_back(rank);
  }
  return lagging;
}

bool Scheduler::EpochTrainedLocked(int epoch) const {
  if (epoch < 0 || epoch >= options_.job.epochs()) return true;  // Progress::LeaseEval says why not.
  if (progress_->eval_opened(epoch)) return true;                // Found trained once: stays so.
  if (options_.job.mode() != SYNC) return leases_->EpochTrained(epoch);
  // SYNC: every live worker that reported has reached the epoch's last step (workers report at
  // once when they complete an epoch), and one at least has; a worker that sent no report yet (a
  // joiner) is not waited for.
  const int64_t end = SyncEpochEndStepLocked(epoch);
  bool reached = false;
  for (int rank : membership_.LiveRanks(WORKER)) {
    const int64_t step = progress_->worker_step(rank);
    if (step > 0 && step < end) return false;
    reached = reached || step >= end;
  }
  return reached;
}

void Scheduler::EvictHoldUpsLocked(absl::Time now, Deferred* deferred) {
  if (state_ != RUNNING) return;
  for (int rank : membership_.LiveRanks(SERVER)) {
    const std::optional<absl::Duration> silent = membership_.SinceHeartbeat(SERVER, rank, now);
    if (silent.has_value() && *silent > 3 * options_.heartbeat_interval) return;
  }
  // While a server of the map restores a cut (a recovery, a change of the server count), every
  // worker waits for it: nobody holds anyone up. Hold-ups count from when the last one serves.
  if (fleet_.restore_step().has_value()) {
    for (int rank = 0; rank < ServersLocked(); ++rank) {
      if (!membership_.is_live(SERVER, rank)) continue;
      const bool started = membership_.SinceHeartbeat(SERVER, rank, now).has_value();
      const int64_t serves = server_reports_.StoreEpoch(rank);
      if (!started || server_reports_.Restoring(rank) || (serves > 0 && serves < fleet_.restore_epoch())) {
        servers_restoring_until_ = now;
        return;
      }
    }
  }
  // Hold-ups count from the latest membership change or restore.
  absl::Time floor = std::max(restored_at_, servers_restoring_until_);
  if (!membership_.events().empty()) floor = std::max(floor, membership_.events().back().at);
  auto held_since = [floor](absl::Time since) { return std::max(since, floor); };
  const absl::Duration hold_up_limit = HoldUpLimit();
  struct Eviction {
    int rank;
    std::string reason;
  };
  std::vector<Eviction> evictions;
  auto hold_up = [&](int rank, absl::Duration held, absl::Duration limit,
                     absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!membership_.is_live(WORKER, rank)) return;
    for (const Eviction& e : evictions) {
      if (e.rank == rank) return;
    }
    evictions.push_back({rank, absl::StrFormat("%s held up %s for %.1f s (limit %.1f s) while heartbeating: evicted",
                                               membership_.Describe(WORKER, rank), what, absl::ToDoubleSeconds(held),
                                               absl::ToDoubleSeconds(limit))});
  };
  // Barriers: the start barrier gets startup_timeout (workers load data and build models before
  // they enter it), every other one the hold-up limit. Servers are never evicted here.
  for (const BarrierSet::Pending& barrier : barriers_.PendingBarriers()) {
    const absl::Duration limit = barrier.name == kServersReadyBarrier ? options_.startup_timeout : hold_up_limit;
    // The start barrier's limit is startup_timeout from its first entry, churn or not.
    const absl::Time since = barrier.name == kServersReadyBarrier ? barrier.since : held_since(barrier.since);
    if (now - since <= limit) continue;
    for (const std::string& key : barrier.missing) {
      absl::string_view rest = key;
      int rank = -1;
      if (!absl::ConsumePrefix(&rest, "worker ") || !absl::SimpleAtoi(rest, &rank)) continue;
      hold_up(rank, now - since, limit, absl::StrCat("barrier '", barrier.name, "'"));
    }
  }
  // SYNC steps the servers reported waiting for a worker's push.
  for (auto it = slow_waits_.begin(); it != slow_waits_.end();) {
    const int rank = it->first;
    const SlowWait wait = it->second;
    if (!membership_.is_live(WORKER, rank) || progress_->worker_step(rank) > wait.step) {
      it = slow_waits_.erase(it);
      continue;
    }
    if (now - held_since(wait.since) > hold_up_limit) {
      hold_up(rank, now - held_since(wait.since), hold_up_limit, absl::StrCat("sync step ", wait.step));
    }
    ++it;
  }
  // SYNC epoch ends: the epoch's evaluation waits for every live worker's report of its last step.
  if (eval_waiting_.has_value()) {
    const auto [epoch, since] = *eval_waiting_;
    if (EpochTrainedLocked(epoch)) {
      eval_waiting_.reset();
    } else if (options_.job.mode() == SYNC) {
      // Only a worker whose reported step stopped moving: one still training (its step moves
      // with each report) is slow, not holding anyone up, whatever another worker claims.
      for (int rank : SyncLaggingWorkersLocked(epoch)) {
        const absl::Time stopped = held_since(std::max(since, progress_->worker_step_changed(rank)));
        if (now - stopped > hold_up_limit) {
          hold_up(rank, now - stopped, hold_up_limit, absl::StrCat("the end of epoch ", epoch));
        }
      }
    }
  }
  // ASYNC/SSP epoch ends: the workers whose training leases are not complete, once every position
  // is cut. One whose leases' batches stop reaching the servers (what the servers confirm, not
  // what it reports) for the hold-up limit holds the epoch up; its leases then go to the others.
  if (options_.job.mode() != SYNC) {
    std::map<int, LeaseHoldUp> waiting;
    for (int rank : leases_->EpochEndWaitsFor()) {
      const int64_t confirmed = leases_->ConfirmedHeldBy(rank);
      auto it = lease_holdups_.find(rank);
      const LeaseHoldUp held =
          it != lease_holdups_.end() && it->second.confirmed == confirmed ? it->second : LeaseHoldUp{confirmed, now};
      waiting[rank] = held;
      const absl::Time since = held_since(held.since);
      if (now - since > hold_up_limit) {
        hold_up(rank, now - since, hold_up_limit,
                absl::StrCat("the end of epoch ", leases_->current_epoch(), " (training leases it holds)"));
      }
    }
    lease_holdups_ = std::move(waiting);
  }
  // Evaluation leases: a lease out for longer than the hold-up limit and 10 times the longest any
  // reported lease took (so only once one was reported) holds the epoch's results, and the
  // job's end, up.
  const absl::Duration longest = progress_->longest_evaluation();
  if (longest > absl::ZeroDuration()) {
    const absl::Duration limit = std::max(hold_up_limit, 10 * longest);
    for (const EvalPool::OutLease& lease : progress_->eval_leases_held()) {
      const absl::Time since = held_since(lease.since);
      if (since != absl::InfinitePast() && now - since > limit) {
        hold_up(lease.holder, now - since, limit, absl::StrCat("evaluation lease ", lease.id));
      }
    }
  }
  for (const Eviction& e : evictions) {
    if (Ended()) break;
    LOG(WARNING) << e.reason;
    slow_waits_.erase(e.rank);
    RemoveWorkerLocked(e.rank, ChangeKind::kDied, e.reason, deferred);
  }
}

}  // namespace scheduler
}  // namespace pstrain
