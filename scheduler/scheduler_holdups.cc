// The Scheduler's hold-up rule (see EvictHoldUpsLocked in scheduler.h): a member that holds the
// others up for longer than its limit is evicted as if it had died, even while it heartbeats.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/barriers.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {

void Scheduler::EvictHoldUpsLocked(absl::Time now, Deferred* deferred) {
  if (state_ != RUNNING) return;
  struct Eviction {
    int rank;
    std::string reason;
  };
  std::vector<Eviction> evictions;
  auto hold_up = [&](int rank, absl::Duration held, absl::Duration limit, absl::string_view what) {
    if (!membership_.is_live(WORKER, rank)) return;
    for (const Eviction& e : evictions) {
      if (e.rank == rank) return;
    }
    evictions.push_back({rank, absl::StrFormat("%s held up %s for %.1f s (limit %.1f s) while heartbeating: evicted",
                                               membership_.Describe(WORKER, rank), what,
                                               absl::ToDoubleSeconds(held), absl::ToDoubleSeconds(limit))});
  };
  // Barriers: the start barrier gets startup_timeout (workers load data and build models before
  // they enter it), every other one dead_after. Servers are never evicted here.
  for (const BarrierSet::Pending& barrier : barriers_.PendingBarriers()) {
    const absl::Duration limit =
        barrier.name == kServersReadyBarrier ? options_.startup_timeout : options_.dead_after;
    if (now - barrier.since <= limit) continue;
    for (const std::string& key : barrier.missing) {
      absl::string_view rest = key;
      int rank = -1;
      if (!absl::ConsumePrefix(&rest, "worker ") || !absl::SimpleAtoi(rest, &rank)) continue;
      hold_up(rank, now - barrier.since, limit, absl::StrCat("barrier '", barrier.name, "'"));
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
    if (now - wait.since > options_.dead_after) {
      hold_up(rank, now - wait.since, options_.dead_after, absl::StrCat("sync step ", wait.step));
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
        const absl::Time stopped = std::max(since, progress_->worker_step_changed(rank));
        if (now - stopped > options_.dead_after) {
          hold_up(rank, now - stopped, options_.dead_after, absl::StrCat("the end of epoch ", epoch));
        }
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
