// Follows a training job's checkpoint folder cut by cut, for a serving process: each Poll looks
// for a cut newer than the one held and, when there is one, returns the model export of that cut
// (serving/checkpoint_export.h AssembleExport).
//
// Reading a new cut costs what changed, not the table: when a server's new file is a delta that
// follows the cut held (or a run of deltas back to it), only those files are read and applied to
// the held checkpoint (server/checkpoint_chain.h ApplyCheckpointDelta). Otherwise (the first
// poll, a new base, a cut held no longer in the new file's chain) the server's whole chain is read.
// Either way the result is byte for byte the whole checkpoint of the new cut.
//
// The servers write each file atomically and prune files no kept step needs, so a poll that races
// a prune can fail (NOT_FOUND); the follower then holds no cut, and the next poll reads whole
// chains. The version a serving process answers from is not touched by a failed poll.
//
// Thread safety: thread-compatible (one thread polls). Poll blocks on reading files.
#ifndef PSTRAIN_SERVING_CHECKPOINT_FOLLOWER_H_
#define PSTRAIN_SERVING_CHECKPOINT_FOLLOWER_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/checkpoint.h"
#include "serving/checkpoint_export.h"
#include "serving/model_export.h"

namespace pstrain::serving {

class CheckpointFollower {
 public:
  // options.step is ignored: the follower always moves to the newest cut every server has.
  explicit CheckpointFollower(CheckpointExportOptions options) : options_(std::move(options)) {}

  // The export of the newest cut, when it is newer than the one held; nullopt when there is none
  // newer (or none at all yet). Errors: those of reading the files (the chain's, naming the file)
  // and of AssembleExport.
  absl::StatusOr<std::optional<ModelExport>> Poll();

  // The cut held (-1: none yet).
  int64_t step() const { return held_.empty() ? -1 : held_[0].step; }
  // The newest cut every server had written at the last poll (-1: none yet): what a poll that
  // succeeds moves to.
  int64_t newest_seen() const { return newest_seen_; }

  // How the cuts were read: delta files applied to a held cut, and whole chains read.
  int64_t deltas_applied() const { return deltas_applied_; }
  int64_t chains_read() const { return chains_read_; }

 private:
  // Server `rank`'s whole checkpoint of `step`: `held` (its checkpoint of the cut held, if any)
  // and the delta files after it when they lead from there to `step`, else its chain.
  absl::StatusOr<server::ShardCheckpoint> Advance(int rank, int64_t step, std::optional<server::ShardCheckpoint> held);

  const CheckpointExportOptions options_;
  std::vector<server::ShardCheckpoint> held_;  // every server's whole checkpoint of one cut, or none
  int64_t newest_seen_ = -1;
  int64_t deltas_applied_ = 0;
  int64_t chains_read_ = 0;
};

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_CHECKPOINT_FOLLOWER_H_
