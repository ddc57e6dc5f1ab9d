// EmbeddingTable::Serialize and Restore: the table's checkpoint format (see embedding_table.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include <zlib.h>

#include "absl/strings/str_cat.h"
#include "common/table_spec.h"
#include "server/embedding_table.h"
#include "server/le_bytes.h"

namespace pstrain::server {
namespace {

constexpr char kMagic[] = "PSTRAINE";  // 8 bytes, no terminator
constexpr uint32_t kVersion = 1;            // rows only
constexpr uint32_t kVersionSections = 2;    // rows, then tagged sections
// Section tags (see EmbeddingTable::Serialize).
constexpr uint32_t kSketchSection = 1;
constexpr uint32_t kRowMetaSection = 2;
constexpr uint32_t kTombstoneSection = 3;
constexpr uint32_t kTombstonesLostSection = 4;
constexpr uint32_t kRowDtypeSection = 5;
constexpr uint32_t kClockSection = 6;

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

void EmbeddingTable::Serialize(std::string* out) const {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the format is little-endian");
  const size_t start = out->size();
  const uint32_t record_bytes = static_cast<uint32_t>(record_floats_ * sizeof(float));
  std::vector<std::pair<uint64_t, uint32_t>> rows;
  rows.reserve(index_.size());
  for (const KeyRow& s : index_) rows.emplace_back(uint64_t{s.key}, uint32_t{s.row});
  std::sort(rows.begin(), rows.end());

  out->reserve(start + 44 + options_.name.size() + rows.size() * (8 + record_bytes));
  out->append(kMagic, 8);
  const bool with_sketch = admission_ != nullptr && admission_->has_state();
  const bool half = options_.row_dtype != TableSpec::FP32;
  const bool sections = with_sketch || eviction_ != nullptr || half;
  PutBytes<uint32_t>(sections ? kVersionSections : kVersion, out);
  PutBytes<int32_t>(options_.id, out);
  PutBytes<int32_t>(options_.dim, out);
  PutBytes<int32_t>(static_cast<int32_t>(options_.optimizer.type), out);
  PutBytes<uint32_t>(record_bytes, out);
  PutBytes<uint32_t>(static_cast<uint32_t>(options_.name.size()), out);
  out->append(options_.name);
  PutBytes<uint64_t>(rows.size(), out);
  for (const auto& [key, row] : rows) {
    PutBytes<uint64_t>(key, out);
    out->append(reinterpret_cast<const char*>(Record(row)), record_bytes);
  }
  // A section: tag, then its length, filled in once written.
  auto section = [out](uint32_t tag, const auto& write) {
    PutBytes<uint32_t>(tag, out);
    const size_t length_at = out->size();
    PutBytes<uint64_t>(0, out);
    write();
    const uint64_t length = out->size() - length_at - sizeof(uint64_t);
    std::memcpy(out->data() + length_at, &length, sizeof(length));
  };
  if (with_sketch) section(kSketchSection, [&] { admission_->Serialize(out); });
  if (eviction_ != nullptr) {
    std::vector<uint32_t> order;
    order.reserve(rows.size());
    for (const auto& [key, row] : rows) order.push_back(row);
    section(kRowMetaSection, [&] { eviction_->SerializeRows(order, out); });
    section(kTombstoneSection, [&] { eviction_->SerializeTombstones(out); });
    if (eviction_->tombstones_lost() > 0) {
      section(kTombstonesLostSection, [&] { eviction_->SerializeTombstonesLost(out); });
    }
    if (eviction_->clock() != nullptr) section(kClockSection, [&] { eviction_->SerializeClock(out); });
  }
  if (half) section(kRowDtypeSection, [&] { PutBytes<uint32_t>(static_cast<uint32_t>(options_.row_dtype), out); });
  PutBytes<uint32_t>(Crc32(out->data() + start, out->size() - start), out);
}

absl::Status EmbeddingTable::Restore(absl::string_view data, int64_t last_update) {
  const std::string where = absl::StrCat("restore of table '", options_.name, "'");
  constexpr size_t kFixed = 8 + 4 * 6;  // magic, version .. name length
  if (data.size() < kFixed + 8 + 4) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", data.size(), " bytes, too short for a table checkpoint"));
  }
  if (std::memcmp(data.data(), kMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(where, ": bad magic, not a table checkpoint"));
  }
  const uint32_t stored_crc = GetBytes<uint32_t>(data.data() + data.size() - 4);
  const uint32_t crc = Crc32(data.data(), data.size() - 4);
  if (stored_crc != crc) {
    return absl::DataLossError(absl::StrCat(where, ": checksum mismatch (stored ", stored_crc,
                                            ", computed ", crc, ")"));
  }
  const char* p = data.data() + 8;
  const uint32_t version = GetBytes<uint32_t>(p);
  if (version != kVersion && version != kVersionSections) {
    return absl::UnimplementedError(absl::StrCat(where, ": format version ", version, ", this build reads ", kVersion,
                                                 " and ", kVersionSections));
  }
  const int32_t id = GetBytes<int32_t>(p + 4);
  const int32_t dim = GetBytes<int32_t>(p + 8);
  const int32_t type = GetBytes<int32_t>(p + 12);
  const uint32_t record_bytes = GetBytes<uint32_t>(p + 16);
  const uint32_t name_size = GetBytes<uint32_t>(p + 20);
  p += 24;
  if (data.size() < kFixed + name_size + 8 + 4) {
    return absl::DataLossError(absl::StrCat(where, ": name of ", name_size, " bytes overruns the ",
                                            data.size(), "-byte buffer"));
  }
  const absl::string_view name(p, name_size);
  p += name_size;
  const uint64_t num_rows = GetBytes<uint64_t>(p);
  p += 8;
  if (name != options_.name || id != options_.id) {
    return absl::FailedPreconditionError(absl::StrCat(where, " (id ", options_.id,
                                                      "): the checkpoint is of table '", name,
                                                      "' (id ", id, ")"));
  }
  if (dim != options_.dim) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": checkpoint dim ", dim, ", table dim ", options_.dim));
  }
  if (type != static_cast<int32_t>(options_.optimizer.type)) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": checkpoint optimizer ",
        SparseOptimizerName(static_cast<SparseOptimizerOptions::Type>(type)), " (", type,
        "), table optimizer ", SparseOptimizerName(options_.optimizer.type)));
  }
  size_t body = data.size() - 4 - static_cast<size_t>(p - data.data());
  // Version 2: tagged sections follow the rows.
  absl::string_view sketch, row_meta, tombstones, tombstones_lost, row_dtype, clock;
  if (version == kVersionSections) {
    if (num_rows > body / (8 + record_bytes)) {
      return absl::DataLossError(absl::StrCat(where, ": ", num_rows, " rows of ", 8 + record_bytes,
                                              " bytes overrun the ", body, "-byte body"));
    }
    const size_t rows_bytes = num_rows * (8 + record_bytes);
    size_t at = rows_bytes;
    while (at < body) {
      if (body - at < 12 || GetBytes<uint64_t>(p + at + 4) > body - at - 12) {
        return absl::DataLossError(absl::StrCat(where, ": a section at byte ", at, " of the body overruns its ",
                                                body, " bytes"));
      }
      const uint32_t tag = GetBytes<uint32_t>(p + at);
      const uint64_t length = GetBytes<uint64_t>(p + at + 4);
      const absl::string_view payload(p + at + 12, length);
      if (tag == kSketchSection) {
        sketch = payload;
      } else if (tag == kRowMetaSection) {
        row_meta = payload;
      } else if (tag == kTombstoneSection) {
        tombstones = payload;
      } else if (tag == kTombstonesLostSection) {
        tombstones_lost = payload;
      } else if (tag == kRowDtypeSection) {
        row_dtype = payload;
      } else if (tag == kClockSection) {
        clock = payload;
      } else {
        return absl::DataLossError(absl::StrCat(where, ": unknown section ", tag));
      }
      at += 12 + length;
    }
    body = rows_bytes;
  }
  // The dtype before the record size, which it changes: a checkpoint of another dtype is another
  // table's, not a corrupt one.
  if (!row_dtype.empty() && row_dtype.size() != sizeof(uint32_t)) {
    return absl::DataLossError(absl::StrCat(where, ": a row dtype section of ", row_dtype.size(), " bytes, expected 4"));
  }
  const auto dtype = row_dtype.empty() ? TableSpec::FP32 : static_cast<TableSpec::RowDtype>(GetBytes<uint32_t>(row_dtype.data()));
  if (dtype != options_.row_dtype) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": checkpoint row dtype ", RowDtypeName(dtype),
                                                      ", table row dtype ", RowDtypeName(options_.row_dtype)));
  }
  const size_t expected_record = record_floats_ * sizeof(float);
  if (record_bytes != expected_record) {
    return absl::DataLossError(absl::StrCat(where, ": record of ", record_bytes,
                                            " bytes, expected ", expected_record));
  }
  if (num_rows > body / (8 + record_bytes) || body != num_rows * (8 + record_bytes)) {
    return absl::DataLossError(absl::StrCat(where, ": ", num_rows, " rows of ", 8 + record_bytes,
                                            " bytes do not fill the ", body, "-byte body"));
  }

  // Build the new rows aside and swap them in, so an error leaves the table as it was.
  Index index;
  index.reserve(num_rows);
  std::vector<float> check(options_.dim);
  std::vector<std::unique_ptr<float[]>> blocks;
  for (uint64_t row = 0; row < num_rows; ++row) {
    const uint64_t key = GetBytes<uint64_t>(p);
    if (row > 0 && key <= GetBytes<uint64_t>(p - 8 - record_bytes)) {
      return absl::DataLossError(absl::StrCat(where, ": row ", row, " key ", key,
                                              " is not greater than the key before it"));
    }
    if (row % kRowsPerBlock == 0) blocks.push_back(NewBlock());
    float* record = blocks.back().get() + (row % kRowsPerBlock) * record_floats_;
    std::memcpy(record, p + 8, record_bytes);
    // The checksum only proves the bytes are the ones written: a row of NaN would train to
    // nothing, so it is refused, naming the row and element. The value is checked as stored
    // (decoded under a half-width dtype), the state and the step as floats.
    auto bad = [&](const std::string& element, float v) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": row ", row, " (key ", key, ") ", element, " is ",
                                                     std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"),
                                                     ", expected finite values"));
    };
    ReadValue(record, check.data());
    for (int i = 0; i < options_.dim; ++i) {
      if (!std::isfinite(check[i])) return bad(absl::StrCat("value element ", i), check[i]);
    }
    for (int i = value_words_; i < record_floats_; ++i) {
      if (!std::isfinite(record[i])) return bad(absl::StrCat("optimizer state element ", i - value_words_), record[i]);
    }
    index.insert(KeyRow{key, static_cast<uint32_t>(row)});
    p += 8 + record_bytes;
  }
  // Admission's and eviction's state, built fresh so that an error changes nothing: the
  // checkpoint's sketch (or an empty one), the rows' metadata (row i of the checkpoint is row
  // number i here; without it every row as last updated by `last_update`) and the tombstones.
  // A table without eviction ignores the latter two.
  std::unique_ptr<RowAdmission> admission;
  std::unique_ptr<RowEviction> eviction;
  if (absl::Status s = MakePolicies(options_, &admission, &eviction); !s.ok()) return s;  // Create accepted them
  const bool keeps_sketch = admission != nullptr && admission->has_state();
  if (!sketch.empty() && !keeps_sketch) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": the checkpoint carries an admission sketch of ",
                                                      sketch.size(), " bytes; the table ",
                                                      admission == nullptr ? "admits every key"
                                                                           : "keeps no sketch"));
  }
  if (keeps_sketch && sketch.data() != nullptr) {
    if (absl::Status s = admission->Restore(where, sketch); !s.ok()) return s;
  }
  if (eviction != nullptr) {
    if (absl::Status s = eviction->Restore(where, num_rows, row_meta, tombstones, tombstones_lost, clock, last_update); !s.ok()) return s;
  }
  index_ = std::move(index);
  blocks_ = std::move(blocks);
  num_records_ = static_cast<uint32_t>(num_rows);
  free_rows_.clear();
  admission_ = std::move(admission);
  eviction_ = std::move(eviction);
  return absl::OkStatus();
}

}  // namespace pstrain::server
