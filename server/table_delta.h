// A table's delta merged onto the whole table it follows, from their bytes alone
// (server/table_format.h), for reading a checkpoint chain (server/checkpoint_chain.h) without
// building the table.
//
// `base` is a whole table as EmbeddingTable::Serialize wrote it at one cut (or as a previous merge
// made it); `delta` is EmbeddingTable::SerializeDelta's at the next cut. The result is what
// Serialize would have written at that next cut, byte for byte:
//   - the rows: base's, less those a tombstone of the delta names, with the delta's rows added or
//     replacing base's (a key evicted and created again within the interval has both a tombstone
//     and a row: the row wins), in ascending key order;
//   - eviction's metadata follows each row from where the row came;
//   - the sketch, the tombstones and the clock are the delta's (the sketch and the clock whole,
//     the tombstones those since the previous cut, as a whole table at that cut holds them).
//
// Thread safety: a free function.
#ifndef PSTRAIN_SERVER_TABLE_DELTA_H_
#define PSTRAIN_SERVER_TABLE_DELTA_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain::server {

// The merge above. Errors start with `where`: DATA_LOSS for bytes that do not parse
// (ParseTableBytes), keys out of order or metadata of the wrong size; FAILED_PRECONDITION when
// `base` is not a whole table, `delta` is not a delta, or they are of different tables (name, id,
// dim, optimizer, record size, sections), naming both values.
absl::StatusOr<std::string> MergeTableDelta(absl::string_view base, absl::string_view delta, absl::string_view where);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_TABLE_DELTA_H_
