// What one old server's checkpoint of a cut gives one server of another shard map: the part of the
// re-cut (server/checkpoint_reshard.h) that this old server holds, and nothing else, so that a
// change of the server count can send each destination only what moves to it
// (docs/design/resharding.md, "A migration with a background copy").
//
//   old server 0:  [ fc1.weight[0, 600) ]           new server 1 of 3: fc1.weight[400, 800)
//   its part for new server 1:  fc1.weight[400, 600), with its optimizer state
//
// Dense values: the overlaps of the old server's chunks with the destination's chunks under the
// new map, each a chunk of its own. Each embedding table: the old server's rows whose key the jump
// hash gives the destination among the new count (ReshardTable of this one part), with what goes
// with them there (tombstones of those keys, the whole admission sketch, the ttl clock).
//
// The parts of every old server of the cut, given to ReshardCheckpoints in old rank order, re-cut
// to exactly what the whole checkpoints give (the same values, tables and counts, byte for byte):
// a part is the whole checkpoint with what the destination does not keep left out.
//
// Thread safety: a free function with no shared state.
#ifndef PSTRAIN_SERVER_CUT_PART_H_
#define PSTRAIN_SERVER_CUT_PART_H_

#include "absl/status/statusor.h"
#include "proto/cluster.pb.h"
#include "server/checkpoint.h"

namespace pstrain::server {

// The part of `own` (an old server's whole checkpoint of a cut) for server `rank` of map `to` (of
// `to_servers` servers): own's rank, step, mode, membership epoch and state count; the overlapping
// chunks, in (tensor_id, offset) order, with their weights and optimizer state; each table's rows
// of `rank` (possibly none). INVALID_ARGUMENT for a delta (read it through its chain first), a
// chunk outside `to`'s tensors, vectors that disagree with the chunk list, or `rank` outside
// [0, to_servers); ReshardTable's errors for a table.
absl::StatusOr<ShardCheckpoint> CutPartFor(const ShardCheckpoint& own, const ShardMap& to, int to_servers, int rank);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_CUT_PART_H_
