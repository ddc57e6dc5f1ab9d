#include "serving/checkpoint_follower.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/server_counts.h"
#include "common/status_macros.h"
#include "server/checkpoint_chain.h"

namespace pstrain::serving {

absl::StatusOr<server::ShardCheckpoint> CheckpointFollower::Advance(int rank, int64_t step,
                                                                    std::optional<server::ShardCheckpoint> held) {
  const std::string& dir = options_.checkpoint_dir;
  if (held.has_value()) {
    // Walk back from `step` through delta files to the cut held. The base steps read here are not
    // checked (ReadCheckpointBaseStep reads no checksum): anything odd ends the walk, and the
    // chain read below, which checks every file, says what is wrong.
    std::vector<int64_t> path;  // newest first
    int64_t s = step;
    for (int i = 0; i < server::kMaxChainLength && s > held->step; ++i) {
      absl::StatusOr<int64_t> base = server::ReadCheckpointBaseStep(CheckpointPath(dir, rank, s));
      if (!base.ok() || *base >= s) break;
      path.push_back(s);
      s = *base;
    }
    if (s == held->step) {
      server::ShardCheckpoint whole = std::move(held).value();
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        const std::string file = CheckpointPath(dir, rank, *it);
        ASSIGN_OR_RETURN(server::ShardCheckpoint delta, server::ReadCheckpoint(file));
        if (delta.rank != rank || delta.step != *it || delta.base_step != whole.step) {
          return absl::DataLossError(absl::StrCat("checkpoint '", file, "' holds server ", delta.rank, "'s step ",
                                                  delta.step, " on step ", delta.base_step, ", expected server ", rank,
                                                  "'s step ", *it, " on step ", whole.step));
        }
        ASSIGN_OR_RETURN(whole, server::ApplyCheckpointDelta(std::move(whole), std::move(delta)));
        ++deltas_applied_;
      }
      return whole;
    }
  }
  ++chains_read_;
  return server::ReadCheckpointChain(dir, rank, step);
}

absl::StatusOr<std::optional<ModelExport>> CheckpointFollower::Poll() {
  // The server count of each stretch of cuts (a job resumed on another count changes it).
  ASSIGN_OR_RETURN(const std::vector<ServerCountEra> eras,
                   ReadServerCounts(options_.checkpoint_dir, options_.job.num_servers()));
  absl::StatusOr<ConsistentCut> cut = LatestConsistentCut(options_.checkpoint_dir, eras);
  if (absl::IsNotFound(cut.status())) return std::nullopt;
  RETURN_IF_ERROR(cut.status());
  const int64_t newest = cut->step;
  const int num_servers = cut->num_servers;
  newest_seen_ = std::max(newest_seen_, newest);
  if (newest <= step()) return std::nullopt;
  // The cut held is consumed: on any failure below none is held, and the next poll reads chains.
  // A cut of another server count has other shards: its chains are read whole.
  std::vector<server::ShardCheckpoint> old = std::move(held_);
  held_.clear();
  if (old.size() != static_cast<size_t>(num_servers)) old.clear();
  std::vector<server::ShardCheckpoint> next;
  for (int r = 0; r < num_servers; ++r) {
    std::optional<server::ShardCheckpoint> mine;
    if (static_cast<size_t>(r) < old.size()) mine = std::move(old[r]);
    ASSIGN_OR_RETURN(server::ShardCheckpoint ckpt, Advance(r, newest, std::move(mine)));
    next.push_back(std::move(ckpt));
  }
  ASSIGN_OR_RETURN(ModelExport e, AssembleExport(next, options_));
  held_ = std::move(next);
  return e;
}

}  // namespace pstrain::serving
