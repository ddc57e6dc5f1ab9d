// Checkpoint chains: a whole checkpoint (a base) and the deltas after it, one per cut
// (server/checkpoint.h version 3, JobSpec.full_checkpoint_every > 1), read as one whole checkpoint
// and pruned as a unit.
//
// Every file keeps its name, `server-<rank>-step-<step>.ckpt`, whole or delta, so the scheduler
// and the tools list steps as before (common/checkpoint_files.h); a delta's file names its base
// step inside. A step is restorable when its file and those of the steps its chain follows, back
// to a base, are all there and sound. The writer (ParameterStore) keeps that true: it writes a
// delta only on a base already written, and PruneCheckpoints never removes a file a kept step
// needs.
//
// Thread safety: free functions with no shared state; one writer per rank's files.
#ifndef PSTRAIN_SERVER_CHECKPOINT_CHAIN_H_
#define PSTRAIN_SERVER_CHECKPOINT_CHAIN_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/checkpoint.h"

namespace pstrain::server {

// The checkpoint of `step` of server `rank` in `dir` as a whole checkpoint (base_step -1): its
// file, and when that is a delta, the base and the deltas between, merged (dense values from the
// newest file; tables merged delta by delta, server/table_delta.h). Byte for byte what a whole
// checkpoint written at that cut would hold. Errors name the file at fault and, when the chain is
// broken, the newest earlier step that restores ("the chain restores up to step S"): a file's
// ReadCheckpoint error (NOT_FOUND for `step`'s own file missing); DATA_LOSS for a gap (a delta's
// base file missing), a file of another rank or step, a table that does not merge, or a chain of
// more than kMaxChainLength files. Blocks on disk I/O: reads every file of the chain.
absl::StatusOr<ShardCheckpoint> ReadCheckpointChain(const std::string& dir, int rank, int64_t step);

// `delta` (a checkpoint whose base_step is whole.step) applied to `whole` (a whole checkpoint, or
// one made whole by this function): the whole checkpoint of delta.step, as ReadCheckpointChain
// gives it. For a reader that follows a chain cut by cut (serving/checkpoint_follower.h) without
// reading it again. DATA_LOSS when the tables do not merge (MergeTableDelta), naming the step and
// table. The caller checks that `delta` follows `whole`.
absl::StatusOr<ShardCheckpoint> ApplyCheckpointDelta(ShardCheckpoint whole, ShardCheckpoint delta);

// Files a chain may span: bounds the reading of a crafted folder.
inline constexpr int kMaxChainLength = 10000;

// The base step a checkpoint file names (version 3), or -1 for a whole checkpoint; reads its
// header and last 12 bytes only. Errors as ReadCheckpoint's for a missing, short or foreign file
// (the checksum is not checked).
absl::StatusOr<int64_t> ReadCheckpointBaseStep(const std::string& path);

// Removes server `rank`'s files in `dir` that the newest `keep` (>= 1) steps do not need: every
// step older than the base of the oldest kept step's chain. `keep_from` keeps that step too, and
// every newer one, with their chains (the oldest step the scheduler may still ask to restore;
// 0 keeps every file). A file whose base step cannot be read stops the walk (nothing older than
// it is removed). Returns the removed steps; a file that cannot be removed is logged and kept.
std::vector<int64_t> PruneCheckpoints(const std::string& dir, int rank, size_t keep,
                                      int64_t keep_from = std::numeric_limits<int64_t>::max());

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_CHECKPOINT_CHAIN_H_
