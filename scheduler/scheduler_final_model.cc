// Scheduler, part three: the final model, assembled from the servers' own shards once every live
// worker is done (see "The final model" in scheduler.h). No member can submit it.
#include "scheduler/scheduler.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {

absl::Status Scheduler::SubmitFinalModel(const FinalModel& model) {
  return absl::PermissionDeniedError(absl::StrCat(
      "final model from worker ", model.worker_rank(), " (", model.model_file().size(),
      " bytes): refused; no member submits the final model: the scheduler assembles it from the servers' shards "
      "once every worker is done"));
}

bool Scheduler::AwaitsFinalShardsLocked() const {
  return state_ == RUNNING && NeedsFinalModel() && !final_model_.written() && progress_->finished();
}

std::vector<int> Scheduler::FinalShardsWantedLocked(int rank) const {
  std::vector<int> wanted;
  if (!AwaitsFinalShardsLocked() || !membership_.is_live(SERVER, rank)) return wanted;
  for (int shard = 0; shard < ServersLocked(); ++shard) {
    if (!final_model_.Holds(shard) && fleet_.PrimaryOf(shard) == rank) wanted.push_back(shard);
  }
  return wanted;
}

absl::Status Scheduler::TakeFinalShardLocked(const FinalShard& shard) {
  RETURN_IF_ERROR(final_model_.CheckIndex(shard));
  if (!membership_.is_live(SERVER, shard.server_rank()) || fleet_.PrimaryOf(shard.shard()) != shard.server_rank()) {
    return absl::PermissionDeniedError(absl::StrCat("final shard ", shard.shard(), " from server ", shard.server_rank(),
                                                    ": shard ", shard.shard(), " is served by server ",
                                                    fleet_.PrimaryOf(shard.shard()), ", which alone sends it"));
  }
  RETURN_IF_ERROR(final_model_.Take(shard, membership_.View().shard_map()));
  VLOG(1) << "final shard " << shard.shard() << " from server " << shard.server_rank() << ": " << shard.chunks_size()
          << " chunks taken";
  return absl::OkStatus();
}

bool Scheduler::FailForLostFinalShardLocked(int rank, absl::string_view reason, Deferred* deferred) {
  if (!AwaitsFinalShardsLocked()) return false;
  if (final_model_.Holds(rank)) return false;
  EndLocked(FAILED,
            absl::UnavailableError(absl::StrCat(
                reason, "; server ", rank, " died after the last step, before it sent its final shard, so ",
                options_.job.final_model_path(),
                " cannot be written (a replacement would restore an earlier checkpoint; --replicas=2 keeps a "
                "live copy that would send it)")),
            deferred);
  return true;
}

absl::Status Scheduler::SubmitFinalShard(const FinalShard& shard) {
  const std::string what = absl::StrCat("final shard ", shard.shard(), " from server ", shard.server_rank());
  absl::StatusOr<std::string> bytes;
  // One write at a time: a shard arriving while the model is written waits, then finds it written.
  absl::MutexLock write_lock(&model_write_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!NeedsFinalModel()) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": the job has no final_model_path"));
    }
    if (state_ == FAILED) return JobFailedError();
    if (final_model_.written() || state_ == FINISHED) return absl::OkStatus();
    if (!AwaitsFinalShardsLocked()) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": not asked for; the scheduler asks for the final shards once every live worker is done"));
    }
    if (final_model_.Holds(shard.shard())) return absl::OkStatus();
    RETURN_IF_ERROR(TakeFinalShardLocked(shard));
    if (!final_model_.Complete()) return absl::OkStatus();
    bytes = final_model_.Serialize(membership_.View().shard_map());
  }
  if (!bytes.ok()) {
    // The shard map disagrees with itself: a bug, not the servers' doing.
    const absl::Status reason(absl::StatusCode::kInternal,
                              absl::StrCat("assembling the final model: ", bytes.status().message()));
    Fail(reason);
    return reason;
  }
  const std::string& model_file = *bytes;
  if (absl::Status written = options_.write_final_model(model_file); !written.ok()) {
    absl::Status reason(written.code(), absl::StrCat("final model assembled from the servers' shards (",
                                                     model_file.size(), " bytes): ", written.message()));
    Fail(reason);
    return reason;
  }
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    final_model_.MarkWritten();
    const int shards = ServersLocked();
    LOG(INFO) << "final model assembled from " << shards << (shards == 1 ? " shard (" : " shards (")
              << model_file.size() << " bytes) written to " << options_.job.final_model_path();
    MaybeFinishLocked(&deferred);
    SaveLocked(&deferred);
  }
  return Run(std::move(deferred));
}

}  // namespace scheduler
}  // namespace pstrain
