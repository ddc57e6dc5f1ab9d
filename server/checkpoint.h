// A checkpoint of one server's shard: its weights, the optimizer state of every chunk, and the
// step they belong to, so a restarted server can resume where it left off.
//
// Byte layout (all integers and floats little-endian):
//
//   offset  size          field
//   0       8             magic "PSTRAINC"
//   8       4             uint32 version: 1 without embedding tables, 2 with, 3 a delta
//   12      4             int32 server rank
//   16      8             int64 step (updates applied)
//   24      4             int32 mode (proto Mode)
//   28      8             int64 membership epoch
//   36      8             uint64 layout fingerprint (LayoutFingerprint)
//   44      4             uint32 chunk count C
//   48      20 * C        per chunk: int32 tensor id, int64 offset, int64 length
//           4             uint32 state-vector count S (the job optimizer's, same for every chunk;
//                         an averaged tensor's chunk, which has no optimizer state, stores zeros)
//                         then per chunk, in order:
//             4 * length    float32 weights
//             4 * length    float32 state vector 0, ..., S-1
//           versions 2 and 3:
//           4             uint32 table count T
//                         then per table, in job order: uint64 length N, then N bytes, the
//                         table's rows as EmbeddingTable::Serialize writes them (its own CRC);
//                         version 3: as EmbeddingTable::SerializeDelta writes them
//           version 3 only:
//           8             int64 base step: the step of the cut this delta follows
//   end-4   4             uint32 CRC-32 (zlib crc32) of every byte before it
//
// A delta (version 3; JobSpec.full_checkpoint_every > 1) holds the dense values whole (they are
// small) and, per table, only the rows changed since the previous cut with that cut's tombstones:
// it is read through the chain it ends (server/checkpoint_chain.h ReadCheckpointChain), back to
// the last whole checkpoint (a base).
//
// Files are named `<dir>/server-<rank>-step-<step, 10 digits>.ckpt` and written atomically (to
// `<name>.tmp`, fsync, rename, fsync of the folder), so a reader never sees a half-written file.
//
// Thread safety: free functions with no shared state.
#ifndef PSTRAIN_SERVER_CHECKPOINT_H_
#define PSTRAIN_SERVER_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_files.h"
#include "common/file_io.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"

namespace pstrain::server {

inline constexpr char kCheckpointMagic[] = "PSTRAINC";  // 8 bytes on disk, no terminator
// Version 2 adds the embedding tables; a shard without tables is still written as version 1.
inline constexpr uint32_t kCheckpointVersion = 2;
inline constexpr uint32_t kCheckpointVersionDense = 1;
// A delta on the checkpoint of base_step (see above).
inline constexpr uint32_t kCheckpointVersionDelta = 3;

struct ShardCheckpoint {
  int rank = 0;
  int64_t step = 0;  // updates applied
  Mode mode = MODE_UNSPECIFIED;
  int64_t membership_epoch = 0;
  uint64_t layout_fingerprint = 0;
  // The server's chunks sorted by (tensor_id, offset); tensor_id, offset and length are stored,
  // server_rank is not (ReadCheckpoint sets it to `rank`).
  std::vector<ChunkSpec> chunks;
  int num_state_vectors = 0;
  // Every chunk's weights, back to back in chunk order (sum of lengths floats).
  std::vector<float> weights;
  // num_state_vectors vectors, each laid out like `weights`.
  std::vector<std::vector<float>> state;
  // The shard's rows of each embedding table (JobSpec.tables order), EmbeddingTable::Serialize's
  // bytes (a delta: SerializeDelta's); empty for a job without tables.
  std::vector<std::string> tables;
  // -1: a whole checkpoint. >= 0: a delta on the checkpoint of this step (the previous cut), whose
  // tables hold only what changed since; the dense values are whole all the same.
  int64_t base_step = -1;
};

// CheckpointPath, LatestConsistentStep and ListCheckpointSteps (file names only) are in
// common/checkpoint_files.h.
using ::pstrain::CheckpointPath;
using ::pstrain::LatestConsistentStep;
using ::pstrain::ListCheckpointSteps;

// A fingerprint of the layout a checkpoint belongs to: every tensor's id, name and shape, which
// tensors are averaged (TensorSpec.averaged; nothing is added when none is, so fingerprints of
// models without any are unchanged), and the (tensor_id, offset, length) of each chunk `rank`
// owns, in (tensor_id, offset) order. Stable
// across processes and builds (FNV-1a over a fixed encoding), so a checkpoint is never restored
// into a different model or split.
uint64_t LayoutFingerprint(const ShardMap& map, int rank);

// Size in bytes of the file WriteCheckpoint writes for `ckpt`.
int64_t CheckpointFileSize(const ShardCheckpoint& ckpt);

// Writes `ckpt` to `path` atomically, with permission bits `mode` (JobSpec.output_mode). INVALID_ARGUMENT when the
// vectors disagree with the chunk list (weights or a state vector of the wrong size, state.size() !=
// num_state_vectors); for I/O failures the errno's code (NOT_FOUND for a missing folder, RESOURCE_EXHAUSTED for a full
// disk, else INTERNAL) naming the path. Blocks on disk I/O including two fsyncs.
absl::Status WriteCheckpoint(const std::string& path, const ShardCheckpoint& ckpt, mode_t mode = kDefaultOutputMode);

// The bytes WriteCheckpoint would write for `ckpt`, in memory (to send a checkpoint, or a part of
// one, to another server). INVALID_ARGUMENT as WriteCheckpoint's for vectors that disagree with
// the chunk list.
absl::StatusOr<std::string> EncodeCheckpoint(const ShardCheckpoint& ckpt);

// ReadCheckpoint's parse and checks of a checkpoint's bytes (a file's, or EncodeCheckpoint's
// received from another server), with the same errors, each starting with `what`.
absl::StatusOr<ShardCheckpoint> DecodeCheckpoint(absl::string_view contents, absl::string_view what);

// Reads and verifies one checkpoint file, whole or a delta (base_step >= 0; ReadCheckpointChain
// reads one into a whole checkpoint). Errors name the file: NOT_FOUND (no file),
// FAILED_PRECONDITION (not a regular file: nothing is read), DATA_LOSS (bad magic, truncated,
// trailing bytes, malformed header, checksum mismatch, a delta's base step not before its step),
// INVALID_ARGUMENT (unsupported version; a NaN or infinite weight or optimizer state, naming the
// chunk and the element). Blocks on disk I/O.
absl::StatusOr<ShardCheckpoint> ReadCheckpoint(const std::string& path);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_CHECKPOINT_H_
