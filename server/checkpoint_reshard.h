// Re-cutting the checkpoints of one consistent cut, taken under one shard map, into one server's
// shard of another map: the building block of resuming a job on another server count
// (docs/design/resharding.md, "Resuming on another server count").
//
// The cut is every old server's whole checkpoint of one step (a delta read through its chain,
// server/checkpoint_chain.h). Every element of the model, with its optimizer state, is taken
// from the one old checkpoint whose chunks hold it and placed into the new shard's chunks:
//
//   old (2 servers):  [ server 0: fc1.weight[0, 600) | server 1: fc1.weight[600, 800), fc1.bias ]
//   new (3 servers):  [ 0: fc1.weight[0, 400) | 1: fc1.weight[400, 800) | 2: fc1.bias         ]
//   new server 1 takes fc1.weight[400, 600) from old server 0 and [600, 800) from old server 1.
//
// Values are copied, never recomputed, so a model re-cut and trained on is the model trained on
// under the old cut (docs/design/resharding.md, "Why it can be exact").
//
// Each embedding table is re-cut by key: the new server keeps the rows the jump hash gives it
// among the new count (server/table_reshard.h, which also says what becomes of the tombstones,
// the admission sketch and the ttl clock).
//
// Thread safety: a free function with no shared state.
#ifndef PSTRAIN_SERVER_CHECKPOINT_RESHARD_H_
#define PSTRAIN_SERVER_CHECKPOINT_RESHARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/cluster.pb.h"
#include "server/checkpoint.h"
#include "server/table_reshard.h"

namespace pstrain::server {

// The checkpoint server `rank` of map `to` (of `to_servers` servers) would hold at the cut's step:
// rank `rank`, the cut's step, mode and membership epoch, `to`'s layout fingerprint for `rank`,
// `to`'s chunks of `rank` (in (tensor_id, offset) order) with their weights and optimizer state
// from `cut`, and each table's rows of `rank` (ReshardTable). Errors, naming the old checkpoint
// and the element: INVALID_ARGUMENT for an empty cut, a delta, checkpoints of different steps,
// modes, optimizer state counts or table counts, a chunk outside `to`'s tensors, an element held
// by two old checkpoints, or one that no old checkpoint holds (a server's checkpoint missing from
// the cut); ReshardTable's errors for a table. Adds what the new shard holds, and what of it an
// old server of another rank held, to *counts (may be null; ReshardCounts, server/table_reshard.h).
absl::StatusOr<ShardCheckpoint> ReshardCheckpoints(const std::vector<ShardCheckpoint>& cut, const ShardMap& to,
                                                   int to_servers, int rank, ReshardCounts* counts = nullptr);
// The same over borrowed checkpoints (none null), in old rank order: whole ones read from disk
// and parts received from their servers (server/cut_part.h) alike.
absl::StatusOr<ShardCheckpoint> ReshardCheckpoints(const std::vector<const ShardCheckpoint*>& cut, const ShardMap& to,
                                                   int to_servers, int rank, ReshardCounts* counts = nullptr);

// The cut of `step` in `dir`, taken under `from_servers` servers: every old rank's checkpoint of
// `step` read through its chain (ReadCheckpointChain), in rank order. Errors name the step and the
// old rank whose file fails (ReadCheckpointChain's codes). Blocks on disk I/O: reads the whole
// model. A server that re-cuts the cut for more than one store (its shard and its copy) reads it
// once.
absl::StatusOr<std::vector<ShardCheckpoint>> ReadCut(const std::string& dir, int from_servers, int64_t step);

// ReadCut, then ReshardCheckpoints for server `rank` of map `to` (of `to_servers` servers).
absl::StatusOr<ShardCheckpoint> ReadResharded(const std::string& dir, int from_servers, int64_t step,
                                              const ShardMap& to, int to_servers, int rank);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_CHECKPOINT_RESHARD_H_
