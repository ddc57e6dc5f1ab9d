// One embedding table's checkpoints from every server of a cut, re-cut into one server's table of
// another server count, from their bytes alone (server/table_format.h), for resuming a job on
// another count (server/checkpoint_reshard.h; docs/design/resharding.md).
//
// Each old server holds the rows whose key the jump hash gave it (ServerOfKey(key, old count));
// new server `rank` of `num_servers` keeps every old server's rows with ServerOfKey(key,
// num_servers) == rank, each with its record (value and optimizer state) and its eviction
// metadata, in ascending key order, as EmbeddingTable::Serialize writes them. What is not a row:
//   - tombstones: those of the kept keys, in the order of their updates (oldest first); past the
//     cap, the oldest are dropped and counted as lost, as a table does;
//   - tombstones lost: the old servers' counts, summed (any lost makes the next cut whole);
//   - the count-min sketch of admission count:N counts hashes, not keys, so it cannot be split:
//     the new server takes the element-wise sum of the old sketches, saturating at 255. A sketch
//     only over-counts, so a key is admitted no later than before (not what a run on the new count
//     would hold);
//   - eviction's ttl clock: merged so that no row leaves early. For every update u that an old
//     clock sampled, the merged clock says "u ran no later than" the latest time any old clock
//     gives for u (the time of its first sample at or past u, else its now); its now is the
//     latest now.
//
// Thread safety: a free function.
#ifndef PSTRAIN_SERVER_TABLE_RESHARD_H_
#define PSTRAIN_SERVER_TABLE_RESHARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain::server {

// What a re-cut gave one new shard: its rows and bytes, and of those the ones an old server of
// another rank held (what a migration over the network would send). Bytes: dense values with
// their optimizer state; rows with their key, optimizer state and eviction metadata.
struct ReshardCounts {
  int64_t rows = 0;
  int64_t rows_moved = 0;
  int64_t bytes = 0;
  int64_t bytes_moved = 0;
};

// The re-cut above. `parts`: every old server's whole table (EmbeddingTable::Serialize's bytes, or
// a chain merged by ReadCheckpointChain), in old rank order. Adds the kept rows to *counts (may be
// null; a row is moved when its part's rank is not `rank`). Errors start with `where`: DATA_LOSS
// for bytes that do not parse (ParseTableBytes), keys out of order, metadata, tombstones, sketch
// or clock of the wrong size; FAILED_PRECONDITION for a delta or parts of different tables (name,
// id, dim, optimizer, record size, row dtype, sections), naming both values; INVALID_ARGUMENT for
// no parts or a key held by two of them.
absl::StatusOr<std::string> ReshardTable(const std::vector<absl::string_view>& parts, int num_servers, int rank,
                                         absl::string_view where, ReshardCounts* counts = nullptr);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_TABLE_RESHARD_H_
