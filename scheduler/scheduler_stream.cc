// Scheduler, a job on a data stream: taking in the files that became ready (RefreshStream). See
// scheduler.h and scheduler/stream_feed.h.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {

int64_t Scheduler::StreamTrainedLocked() const {
  // ASYNC: every lease below the watermark is applied on every server and reported by its holder.
  if (options_.job.mode() != SYNC) return std::min(leases_->SettledPosition(), train_samples_);
  // SYNC: every step below the slowest live worker's reported one is applied. A worker that has
  // not reported yet counts from where it started: a joiner where the others were (so it is not
  // waited for), one there from the start at the job's first step (0, or the step resumed from).
  // The latter may have trained many steps unreported, and its predictions of the first files
  // must still find them open.
  const int64_t first_step = options_.resume_step.value_or(0);
  std::optional<int64_t> slowest;
  for (int rank : membership_.LiveRanks(WORKER)) {
    int64_t step = progress_->worker_step(rank);
    if (step == 0) {
      if (JoinedWhileRunningLocked(rank)) continue;
      step = first_step;
    }
    slowest = slowest.has_value() ? std::min(*slowest, step) : step;
  }
  return std::min(slowest.value_or(first_step) * options_.job.global_batch(), train_samples_);
}

bool Scheduler::JoinedWhileRunningLocked(int worker_rank) const {
  for (const MembershipEvent& e : membership_.events()) {
    if (e.role == WORKER && e.rank == worker_rank && e.kind == ChangeKind::kJoined) return true;
  }
  return false;
}

int64_t Scheduler::StreamKeptFromLocked() const {
  // No rollback: without checkpoints, and in ASYNC, where a replaced server's lost updates are not
  // trained again (scheduler/lease_pool.h, SetServerCounts); the remainders are above the watermark.
  if (!CheckpointsOn(options_.job) || options_.job.mode() != SYNC) return StreamTrainedLocked();
  const int64_t cut = fleet_.RestorableStep();
  return std::min(cut * options_.job.global_batch(), StreamTrainedLocked());
}

StreamStatus Scheduler::StreamStatusLocked(size_t max_files) const {
  StreamStatus out;
  const std::vector<data::StreamFile>& catalog = stream_->catalog().files();
  out.dir = stream_->catalog().dir();
  out.files_ready = static_cast<int64_t>(catalog.size());
  out.records_ready = stream_->records();
  out.ended = stream_->ended();
  out.trained_records = StreamTrainedLocked();
  out.lag_records = out.records_ready - out.trained_records;
  for (const data::StreamFile& f : catalog) out.lag_files += f.first + f.records > out.trained_records ? 1 : 0;
  auto progressive = [](const StreamScores::Figures& f) {
    ProgressiveStatus p;
    p.samples = f.samples;
    p.auc = f.auc;
    p.logloss = f.log_loss;
    return p;
  };
  out.window_files = stream_scores_->window_files();
  out.window = progressive(stream_scores_->Window());
  const std::vector<StreamScores::File> files = stream_scores_->Files();
  for (size_t i = files.size() > max_files ? files.size() - max_files : 0; i < files.size(); ++i) {
    ProgressiveStatus p = progressive(files[i].figures);
    p.file = files[i].index < out.files_ready ? catalog[files[i].index].name : absl::StrCat("#", files[i].index);
    p.closed = files[i].closed;
    out.files.push_back(std::move(p));
  }
  return out;
}

int Scheduler::RefreshStream() {
  std::optional<data::StreamCatalog> catalog;
  int64_t trained = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!stream_.has_value() || Ended() || stream_->ended()) return 0;
    catalog = stream_->catalog();
    // Files wholly before it may be gone (a writer's retention).
    trained = StreamKeptFromLocked();
  }
  absl::StatusOr<int> added = catalog->Refresh(trained);  // lists and counts, unlocked
  if (added.ok() && *added > 0 && options_.record_stream) {
    // Durable before any worker reads the new files: a resumed job must map positions the same way.
    if (absl::Status recorded = options_.record_stream(CatalogState(*catalog)); !recorded.ok()) {
      LOG(WARNING) << "data stream: the catalog was not recorded beside the checkpoints (" << recorded
                   << "); its new files wait for the next look";
      return 0;
    }
  }
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
      leases_->SetStream(train_samples_, stream_->ended());
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
