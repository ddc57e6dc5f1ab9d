// The bytes of one embedding table's checkpoint, read and written without the table itself:
// EmbeddingTable::Serialize's format (a full table, versions 1 and 2, laid out in
// server/embedding_table.h) and its delta (version 3: the rows changed since the previous cut, with
// the same sections). EmbeddingTable writes and restores through these; server/table_delta.h
// merges a delta onto a full table with them, knowing nothing of the table's options.
//
//   offset  size     field
//   0       8        magic "PSTRAINE"
//   8       4        uint32 version: 1 rows only, 2 rows and sections, 3 a delta (rows and sections)
//   12      4        int32 table id
//   16      4        int32 dim
//   20      4        int32 optimizer type
//   24      4        uint32 record bytes R
//   28      4        uint32 name length L, then L bytes of name
//   32+L    8        uint64 row count N
//           N*(8+R)  per row: uint64 key (ascending), then its record
//   (versions 2 and 3) sections, each a uint32 tag, a uint64 length and that many bytes
//   end-4   4        uint32 CRC-32 (zlib) of every byte before it
//
// Sections are written in one order (TableSection below, kSketch first); a reader accepts any.
//
// Thread safety: free functions and plain values.
#ifndef PSTRAIN_SERVER_TABLE_FORMAT_H_
#define PSTRAIN_SERVER_TABLE_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain::server {

inline constexpr uint32_t kTableVersionRows = 1;      // a full table without sections
inline constexpr uint32_t kTableVersionSections = 2;  // a full table with sections
inline constexpr uint32_t kTableVersionDelta = 3;     // the rows changed since the previous cut

// Section tags (EmbeddingTable::Serialize says what each holds).
enum TableSection : uint32_t {
  kSketchSection = 1,          // admission's sketch
  kRowMetaSection = 2,         // eviction's metadata of every row, in the rows' order
  kTombstoneSection = 3,       // eviction's tombstones since the previous cut
  kTombstonesLostSection = 4,  // how many went past the cap (only when not 0)
  kRowDtypeSection = 5,        // the row dtype (only when not FP32)
  kClockSection = 6,           // eviction's ttl_seconds clock
};

// Bytes of one row's eviction metadata (int64 last update, uint32 count) and of one tombstone
// (uint64 key, int64 update) in their sections.
inline constexpr size_t kTableRowMetaBytes = sizeof(int64_t) + sizeof(uint32_t);
inline constexpr size_t kTableTombstoneBytes = sizeof(uint64_t) + sizeof(int64_t);

// A table's bytes, parsed: views into the buffer given to ParseTableBytes. A section that is
// absent has a null data(); one present but empty has a non-null data() and size 0.
struct TableBytes {
  uint32_t version = 0;
  int32_t id = 0;
  int32_t dim = 0;
  int32_t optimizer_type = 0;
  uint32_t record_bytes = 0;
  absl::string_view name;
  uint64_t num_rows = 0;
  absl::string_view rows;  // num_rows * (8 + record_bytes) bytes
  absl::string_view sketch, row_meta, tombstones, tombstones_lost, row_dtype, clock;

  // Row i's key and record. REQUIRES: i < num_rows.
  uint64_t key(uint64_t i) const;
  absl::string_view row(uint64_t i) const { return rows.substr(i * (8 + record_bytes), 8 + record_bytes); }
};

// Parses and verifies `data` (magic, CRC, version, that the name, the rows and the sections fit).
// Errors start with `where`: DATA_LOSS for a truncated or corrupt buffer, an unknown section or
// rows that do not fill the body; UNIMPLEMENTED for an unknown version. Keys are not checked for
// order here (the readers do, naming the row).
absl::StatusOr<TableBytes> ParseTableBytes(absl::string_view data, absl::string_view where);

// Checks shared by the readers of several tables' bytes (server/table_delta.h,
// server/table_reshard.h). `which` names the table in the message ("base", "server 1's").
// Keys strictly ascending, or DATA_LOSS naming the first row out of order.
absl::Status CheckTableKeyOrder(const TableBytes& t, absl::string_view where, absl::string_view which);
// Eviction metadata of every row or none, or DATA_LOSS.
absl::Status CheckTableRowMeta(const TableBytes& t, absl::string_view where, absl::string_view which);
// Whether a section is there, and "present" / "absent" for messages.
inline bool TableSectionPresent(absl::string_view section) { return section.data() != nullptr; }
inline std::string TableSectionPresence(absl::string_view section) {
  return TableSectionPresent(section) ? "present" : "absent";
}
// The row dtype section's value (0, FP32, when absent; -1 when it is not 4 bytes).
int64_t TableRowDtype(absl::string_view section);

// Appends the header through the row count.
void AppendTableHeader(uint32_t version, int32_t id, int32_t dim, int32_t optimizer_type, uint32_t record_bytes,
                       absl::string_view name, uint64_t num_rows, std::string* out);

// Appends a section: its tag, its length, then what `write` appends to *out.
template <typename Write>
void AppendTableSection(TableSection tag, const Write& write, std::string* out);

// Appends the CRC-32 of out[start, end), which ends a table's bytes.
void AppendTableCrc(size_t start, std::string* out);

// --- implementation ---

void AppendTableSectionHeader(TableSection tag, std::string* out);
void FinishTableSection(size_t length_at, std::string* out);

template <typename Write>
void AppendTableSection(TableSection tag, const Write& write, std::string* out) {
  AppendTableSectionHeader(tag, out);
  const size_t length_at = out->size() - sizeof(uint64_t);
  write();
  FinishTableSection(length_at, out);
}

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_TABLE_FORMAT_H_
