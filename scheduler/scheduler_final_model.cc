// Scheduler, part three: the final model, assembled from the servers' own shards once every live
// worker is done (see "The final model" in scheduler.h). No member can submit it.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/model_file.h"
#include "model/param_spec.h"

namespace pstrain {
namespace scheduler {
namespace {

// The shard map's tensors as the model file's params (name and shape, in order).
std::vector<model::ParamSpec> ModelParams(const ShardMap& map) {
  std::vector<model::ParamSpec> params;
  params.reserve(map.tensors_size());
  for (const TensorSpec& t : map.tensors()) {
    model::ParamSpec p;
    p.name = t.name();
    p.shape.assign(t.shape().begin(), t.shape().end());
    p.num_elements = t.num_elements();
    p.flat_offset = t.flat_offset();
    params.push_back(std::move(p));
  }
  return params;
}

int64_t TotalElements(const ShardMap& map) {
  int64_t total = 0;
  for (const TensorSpec& t : map.tensors()) total = std::max(total, t.flat_offset() + t.num_elements());
  return total;
}

}  // namespace

absl::Status Scheduler::SubmitFinalModel(const FinalModel& model) {
  return absl::PermissionDeniedError(absl::StrCat(
      "final model from worker ", model.worker_rank(), " (", model.model_file().size(),
      " bytes): refused; no member submits the final model: the scheduler assembles it from the servers' shards "
      "once every worker is done"));
}

bool Scheduler::AwaitsFinalShardsLocked() const {
  return state_ == RUNNING && NeedsFinalModel() && !final_model_written_ && progress_->finished();
}

std::vector<int> Scheduler::FinalShardsWantedLocked(int rank) const {
  std::vector<int> wanted;
  if (!AwaitsFinalShardsLocked() || !membership_.is_live(SERVER, rank)) return wanted;
  for (int shard = 0; shard < options_.job.num_servers(); ++shard) {
    const bool held = shard < static_cast<int>(final_shards_.size()) && final_shards_[shard];
    if (!held && fleet_.PrimaryOf(shard) == rank) wanted.push_back(shard);
  }
  return wanted;
}

absl::Status Scheduler::TakeFinalShardLocked(const FinalShard& shard) {
  const std::string what = absl::StrCat("final shard ", shard.shard(), " from server ", shard.server_rank());
  const int num_servers = options_.job.num_servers();
  if (shard.shard() < 0 || shard.shard() >= num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no such shard, expected 0..", num_servers - 1));
  }
  if (!membership_.is_live(SERVER, shard.server_rank()) || fleet_.PrimaryOf(shard.shard()) != shard.server_rank()) {
    return absl::PermissionDeniedError(absl::StrCat(what, ": shard ", shard.shard(), " is served by server ",
                                                    fleet_.PrimaryOf(shard.shard()), ", which alone sends it"));
  }
  const ClusterView view = membership_.View();
  const ShardMap& map = view.shard_map();
  // The shard map's chunks of this shard, in its (tensor_id, offset) order.
  std::vector<const ChunkSpec*> expected;
  for (const ChunkSpec& c : map.chunks()) {
    if (c.server_rank() == shard.shard()) expected.push_back(&c);
  }
  if (shard.chunks_size() != static_cast<int>(expected.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", shard.chunks_size(), " chunks, expected ", expected.size(), " (the shard map's)"));
  }
  // Checked in full before anything is copied.
  for (int i = 0; i < shard.chunks_size(); ++i) {
    const FinalShard::Chunk& got = shard.chunks(i);
    const ChunkSpec& want = *expected[i];
    if (got.tensor_id() != want.tensor_id() || got.offset() != want.offset() || got.length() != want.length()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": chunk ", i, " is tensor ", got.tensor_id(), " [", got.offset(), ", +", got.length(),
          "), expected tensor ", want.tensor_id(), " [", want.offset(), ", +", want.length(), ")"));
    }
    if (got.data().size() != static_cast<size_t>(want.length()) * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": chunk ", i, " of tensor '",
                                                     map.tensors(want.tensor_id()).name(), "' holds ",
                                                     got.data().size(), " bytes, expected ",
                                                     want.length() * static_cast<int64_t>(sizeof(float))));
    }
    for (int64_t k = 0; k < want.length(); ++k) {
      float v;
      std::memcpy(&v, got.data().data() + k * sizeof(float), sizeof(float));
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": tensor '", map.tensors(want.tensor_id()).name(),
                                                       "' element ", want.offset() + k, " is ", v,
                                                       "; the final model holds finite values only"));
      }
    }
  }
  if (final_values_.empty()) final_values_.assign(TotalElements(map), 0.0f);
  if (final_shards_.empty()) final_shards_.assign(num_servers, false);
  for (int i = 0; i < shard.chunks_size(); ++i) {
    const ChunkSpec& c = *expected[i];
    const int64_t at = map.tensors(c.tensor_id()).flat_offset() + c.offset();
    std::memcpy(final_values_.data() + at, shard.chunks(i).data().data(), c.length() * sizeof(float));
  }
  final_shards_[shard.shard()] = true;
  VLOG(1) << what << ": " << shard.chunks_size() << " chunks taken";
  return absl::OkStatus();
}

bool Scheduler::FailForLostFinalShardLocked(int rank, absl::string_view reason, Deferred* deferred) {
  if (!AwaitsFinalShardsLocked()) return false;
  const bool held = rank < static_cast<int>(final_shards_.size()) && final_shards_[rank];
  if (held) return false;
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
    if (final_model_written_ || state_ == FINISHED) return absl::OkStatus();
    if (!AwaitsFinalShardsLocked()) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": not asked for; the scheduler asks for the final shards once every live worker is done"));
    }
    const int s = shard.shard();
    if (s >= 0 && s < static_cast<int>(final_shards_.size()) && final_shards_[s]) return absl::OkStatus();
    RETURN_IF_ERROR(TakeFinalShardLocked(shard));
    for (bool held : final_shards_) {
      if (!held) return absl::OkStatus();
    }
    bytes = model::SerializeModelFile(ModelParams(membership_.View().shard_map()), final_values_);
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
    final_model_written_ = true;
    final_values_.clear();
    final_values_.shrink_to_fit();
    const int shards = options_.job.num_servers();
    LOG(INFO) << "final model assembled from " << shards << (shards == 1 ? " shard (" : " shards (")
              << model_file.size() << " bytes) written to " << options_.job.final_model_path();
    MaybeFinishLocked(&deferred);
    SaveLocked(&deferred);
  }
  return Run(std::move(deferred));
}

}  // namespace scheduler
}  // namespace pstrain
