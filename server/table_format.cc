#include "server/table_format.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/le_bytes.h"

namespace pstrain::server {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the format is little-endian");

constexpr char kMagic[] = "PSTRAINE";  // 8 bytes, no terminator
constexpr size_t kFixed = 8 + 4 * 6;   // magic, version .. name length

uint32_t Crc32(const char* data, size_t size) {
  uint32_t crc = static_cast<uint32_t>(crc32(0, Z_NULL, 0));
  const auto* p = reinterpret_cast<const Bytef*>(data);
  while (size > 0) {  // zlib takes a uInt length: feed large buffers in pieces
    const uInt piece = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, p, piece));
    p += piece;
    size -= piece;
  }
  return crc;
}

}  // namespace

absl::Status CheckTableKeyOrder(const TableBytes& t, absl::string_view where, absl::string_view which) {
  for (uint64_t i = 1; i < t.num_rows; ++i) {
    if (t.key(i) <= t.key(i - 1)) {
      return absl::DataLossError(
          absl::StrCat(where, ": ", which, " row ", i, " key ", t.key(i), " is not greater than the key before it"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTableRowMeta(const TableBytes& t, absl::string_view where, absl::string_view which) {
  if (t.row_meta.data() == nullptr || t.row_meta.size() == t.num_rows * kTableRowMetaBytes) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(where, ": ", which, " eviction metadata of ", t.row_meta.size(),
                                          " bytes for ", t.num_rows, " rows, expected ",
                                          t.num_rows * kTableRowMetaBytes));
}

int64_t TableRowDtype(absl::string_view section) {
  if (!TableSectionPresent(section)) return 0;
  return section.size() == sizeof(uint32_t) ? GetBytes<uint32_t>(section.data()) : -1;
}

uint64_t TableBytes::key(uint64_t i) const { return GetBytes<uint64_t>(rows.data() + i * (8 + record_bytes)); }

absl::StatusOr<TableBytes> ParseTableBytes(absl::string_view data, absl::string_view where) {
  if (data.size() < kFixed + 8 + 4) {
    return absl::DataLossError(absl::StrCat(where, ": ", data.size(), " bytes, too short for a table checkpoint"));
  }
  if (std::memcmp(data.data(), kMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(where, ": bad magic, not a table checkpoint"));
  }
  const uint32_t stored_crc = GetBytes<uint32_t>(data.data() + data.size() - 4);
  const uint32_t crc = Crc32(data.data(), data.size() - 4);
  if (stored_crc != crc) {
    return absl::DataLossError(
        absl::StrCat(where, ": checksum mismatch (stored ", stored_crc, ", computed ", crc, ")"));
  }
  TableBytes t;
  const char* p = data.data() + 8;
  t.version = GetBytes<uint32_t>(p);
  if (t.version != kTableVersionRows && t.version != kTableVersionSections && t.version != kTableVersionDelta) {
    return absl::UnimplementedError(absl::StrCat(where, ": format version ", t.version, ", this build reads ",
                                                 kTableVersionRows, " to ", kTableVersionDelta));
  }
  t.id = GetBytes<int32_t>(p + 4);
  t.dim = GetBytes<int32_t>(p + 8);
  t.optimizer_type = GetBytes<int32_t>(p + 12);
  t.record_bytes = GetBytes<uint32_t>(p + 16);
  const uint32_t name_size = GetBytes<uint32_t>(p + 20);
  p += 24;
  if (data.size() < kFixed + name_size + 8 + 4) {
    return absl::DataLossError(
        absl::StrCat(where, ": name of ", name_size, " bytes overruns the ", data.size(), "-byte buffer"));
  }
  t.name = absl::string_view(p, name_size);
  p += name_size;
  t.num_rows = GetBytes<uint64_t>(p);
  p += 8;
  const size_t body = data.size() - 4 - static_cast<size_t>(p - data.data());
  const uint64_t row_bytes = 8 + uint64_t{t.record_bytes};
  if (t.num_rows > body / row_bytes) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", t.num_rows, " rows of ", row_bytes, " bytes overrun the ", body, "-byte body"));
  }
  const size_t rows_bytes = t.num_rows * row_bytes;
  t.rows = absl::string_view(p, rows_bytes);
  if (t.version == kTableVersionRows) {
    if (body != rows_bytes) {
      return absl::DataLossError(
          absl::StrCat(where, ": ", t.num_rows, " rows of ", row_bytes, " bytes do not fill the ", body, "-byte body"));
    }
    return t;
  }
  for (size_t at = rows_bytes; at < body;) {
    if (body - at < 12 || GetBytes<uint64_t>(p + at + 4) > body - at - 12) {
      return absl::DataLossError(
          absl::StrCat(where, ": a section at byte ", at, " of the body overruns its ", body, " bytes"));
    }
    const uint32_t tag = GetBytes<uint32_t>(p + at);
    const uint64_t length = GetBytes<uint64_t>(p + at + 4);
    const absl::string_view payload(p + at + 12, length);
    switch (tag) {
      case kSketchSection:
        t.sketch = payload;
        break;
      case kRowMetaSection:
        t.row_meta = payload;
        break;
      case kTombstoneSection:
        t.tombstones = payload;
        break;
      case kTombstonesLostSection:
        t.tombstones_lost = payload;
        break;
      case kRowDtypeSection:
        t.row_dtype = payload;
        break;
      case kClockSection:
        t.clock = payload;
        break;
      default:
        return absl::DataLossError(absl::StrCat(where, ": unknown section ", tag));
    }
    at += 12 + length;
  }
  return t;
}

void AppendTableHeader(uint32_t version, int32_t id, int32_t dim, int32_t optimizer_type, uint32_t record_bytes,
                       absl::string_view name, uint64_t num_rows, std::string* out) {
  out->append(kMagic, 8);
  PutBytes<uint32_t>(version, out);
  PutBytes<int32_t>(id, out);
  PutBytes<int32_t>(dim, out);
  PutBytes<int32_t>(optimizer_type, out);
  PutBytes<uint32_t>(record_bytes, out);
  PutBytes<uint32_t>(static_cast<uint32_t>(name.size()), out);
  out->append(name.data(), name.size());
  PutBytes<uint64_t>(num_rows, out);
}

void AppendTableSectionHeader(TableSection tag, std::string* out) {
  PutBytes<uint32_t>(tag, out);
  PutBytes<uint64_t>(0, out);  // the length, filled in by FinishTableSection
}

void FinishTableSection(size_t length_at, std::string* out) {
  const uint64_t length = out->size() - length_at - sizeof(uint64_t);
  std::memcpy(out->data() + length_at, &length, sizeof(length));
}

void AppendTableCrc(size_t start, std::string* out) {
  PutBytes<uint32_t>(Crc32(out->data() + start, out->size() - start), out);
}

}  // namespace pstrain::server
