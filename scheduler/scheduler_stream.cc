// Scheduler, a job on a data stream: taking in the files that became ready (RefreshStream). See
// scheduler.h and scheduler/stream_feed.h.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {

int Scheduler::RefreshStream() {
  std::optional<data::StreamCatalog> catalog;
  int64_t trained = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!stream_.has_value() || Ended() || stream_->ended()) return 0;
    catalog = stream_->catalog();
    // SYNC: every step below the slowest live worker's is applied, so its records are trained;
    // files wholly before them may be gone (a writer's retention).
    std::optional<int64_t> slowest;
    for (int rank : membership_.LiveRanks(WORKER)) {
      const int64_t step = progress_->worker_step(rank);
      slowest = slowest.has_value() ? std::min(*slowest, step) : step;
    }
    trained = slowest.value_or(0) * options_.job.global_batch();
  }
  const absl::StatusOr<int> added = catalog->Refresh(trained);  // lists and counts, unlocked
  Deferred deferred;
  int taken = 0;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return 0;
    if (!added.ok()) {
      LOG(ERROR) << "data stream: " << added.status();
      EndLocked(FAILED, added.status(), &deferred);
    } else if (*added > 0 || catalog->ended() != stream_->ended()) {
      taken = *added;
      stream_->Install(*std::move(catalog));
      train_samples_ = stream_->records();
      total_steps_ = stream_->trainable_steps();
      membership_.GrowData(train_samples_, total_steps_);
      progress_->GrowData(train_samples_, total_steps_);
      LOG(INFO) << "data stream: " << taken << " new file(s), " << stream_->catalog().files().size() << " ready with "
                << train_samples_ << " records: " << total_steps_ << " steps trainable"
                << (stream_->ended() ? "; the stream has ended" : "");
      SaveLocked(&deferred);
    }
  }
  (void)Run(std::move(deferred));
  return taken;
}

}  // namespace scheduler
}  // namespace pstrain
