// EmbeddingTable::Serialize and Restore: the table's checkpoint format (see embedding_table.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include <zlib.h>

#include "absl/strings/str_cat.h"
#include "server/embedding_table.h"

namespace pstrain::server {
namespace {

constexpr char kMagic[] = "PSTRAINE";  // 8 bytes, no terminator
constexpr uint32_t kVersion = 1;            // rows only
constexpr uint32_t kVersionAdmission = 2;   // rows, then admission's sketch

template <typename T>
void Put(T value, std::string* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T Get(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

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
  std::vector<std::pair<uint64_t, uint32_t>> rows(index_.begin(), index_.end());
  std::sort(rows.begin(), rows.end());

  out->reserve(start + 44 + options_.name.size() + rows.size() * (8 + record_bytes));
  out->append(kMagic, 8);
  const bool with_sketch = admission_ != nullptr && admission_->has_state();
  Put<uint32_t>(with_sketch ? kVersionAdmission : kVersion, out);
  Put<int32_t>(options_.id, out);
  Put<int32_t>(options_.dim, out);
  Put<int32_t>(static_cast<int32_t>(options_.optimizer.type), out);
  Put<uint32_t>(record_bytes, out);
  Put<uint32_t>(static_cast<uint32_t>(options_.name.size()), out);
  out->append(options_.name);
  Put<uint64_t>(rows.size(), out);
  for (const auto& [key, row] : rows) {
    Put<uint64_t>(key, out);
    out->append(reinterpret_cast<const char*>(Record(row)), record_bytes);
  }
  if (with_sketch) {
    Put<uint64_t>(static_cast<uint64_t>(admission_->bytes_used()), out);
    admission_->Serialize(out);
  }
  Put<uint32_t>(Crc32(out->data() + start, out->size() - start), out);
}

absl::Status EmbeddingTable::Restore(absl::string_view data) {
  const std::string where = absl::StrCat("restore of table '", options_.name, "'");
  constexpr size_t kFixed = 8 + 4 * 6;  // magic, version .. name length
  if (data.size() < kFixed + 8 + 4) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", data.size(), " bytes, too short for a table checkpoint"));
  }
  if (std::memcmp(data.data(), kMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(where, ": bad magic, not a table checkpoint"));
  }
  const uint32_t stored_crc = Get<uint32_t>(data.data() + data.size() - 4);
  const uint32_t crc = Crc32(data.data(), data.size() - 4);
  if (stored_crc != crc) {
    return absl::DataLossError(absl::StrCat(where, ": checksum mismatch (stored ", stored_crc,
                                            ", computed ", crc, ")"));
  }
  const char* p = data.data() + 8;
  const uint32_t version = Get<uint32_t>(p);
  if (version != kVersion && version != kVersionAdmission) {
    return absl::UnimplementedError(absl::StrCat(where, ": format version ", version, ", this build reads ", kVersion,
                                                 " and ", kVersionAdmission));
  }
  const int32_t id = Get<int32_t>(p + 4);
  const int32_t dim = Get<int32_t>(p + 8);
  const int32_t type = Get<int32_t>(p + 12);
  const uint32_t record_bytes = Get<uint32_t>(p + 16);
  const uint32_t name_size = Get<uint32_t>(p + 20);
  p += 24;
  if (data.size() < kFixed + name_size + 8 + 4) {
    return absl::DataLossError(absl::StrCat(where, ": name of ", name_size, " bytes overruns the ",
                                            data.size(), "-byte buffer"));
  }
  const absl::string_view name(p, name_size);
  p += name_size;
  const uint64_t num_rows = Get<uint64_t>(p);
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
  const size_t expected_record = record_floats_ * sizeof(float);
  if (record_bytes != expected_record) {
    return absl::DataLossError(absl::StrCat(where, ": record of ", record_bytes,
                                            " bytes, expected ", expected_record));
  }
  size_t body = data.size() - 4 - static_cast<size_t>(p - data.data());
  // Version 2: the sketch ends the body, after its size.
  absl::string_view sketch;
  if (version == kVersionAdmission) {
    const size_t rows_bytes = num_rows > body / (8 + record_bytes) ? body : num_rows * (8 + record_bytes);
    if (body < rows_bytes + 8 || Get<uint64_t>(p + rows_bytes) != body - rows_bytes - 8) {
      return absl::DataLossError(absl::StrCat(where, ": ", num_rows, " rows of ", 8 + record_bytes,
                                              " bytes and a sketch do not fill the ", body, "-byte body"));
    }
    sketch = absl::string_view(p + rows_bytes + 8, body - rows_bytes - 8);
    body = rows_bytes;
  }
  if (num_rows > body / (8 + record_bytes) || body != num_rows * (8 + record_bytes)) {
    return absl::DataLossError(absl::StrCat(where, ": ", num_rows, " rows of ", 8 + record_bytes,
                                            " bytes do not fill the ", body, "-byte body"));
  }

  // Build the new rows aside and swap them in, so an error leaves the table as it was.
  absl::flat_hash_map<uint64_t, uint32_t> index;
  index.reserve(num_rows);
  std::vector<std::unique_ptr<float[]>> blocks;
  for (uint64_t row = 0; row < num_rows; ++row) {
    const uint64_t key = Get<uint64_t>(p);
    if (row > 0 && key <= Get<uint64_t>(p - 8 - record_bytes)) {
      return absl::DataLossError(absl::StrCat(where, ": row ", row, " key ", key,
                                              " is not greater than the key before it"));
    }
    if (row % kRowsPerBlock == 0) blocks.push_back(NewBlock());
    float* record = blocks.back().get() + (row % kRowsPerBlock) * record_floats_;
    std::memcpy(record, p + 8, record_bytes);
    // The checksum only proves the bytes are the ones written: a row of NaN would train to
    // nothing, so it is refused, naming the row and element.
    for (int i = 0; i < record_floats_; ++i) {
      if (std::isfinite(record[i])) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": row ", row, " (key ", key, ") ",
          i < options_.dim ? absl::StrCat("value element ", i)
                           : absl::StrCat("optimizer state element ", i - options_.dim),
          " is ", std::isnan(record[i]) ? "nan" : (record[i] > 0 ? "inf" : "-inf"),
          ", expected finite values"));
    }
    index.emplace(key, static_cast<uint32_t>(row));
    p += 8 + record_bytes;
  }
  // Admission's state: the checkpoint's sketch, or an empty one (version 1, or a table that
  // admitted every key when it was written).
  std::unique_ptr<RowAdmission> admission;
  if (admission_ != nullptr) {
    absl::StatusOr<std::unique_ptr<RowAdmission>> fresh = RowAdmission::Create(
        absl::StrCat("table '", options_.name, "'"), options_.admission, options_.seed, options_.id);
    if (!fresh.ok()) return fresh.status();  // not reached: Create accepted the same spec
    admission = std::move(fresh).value();
    if (version == kVersionAdmission) {
      if (absl::Status s = admission->Restore(where, sketch); !s.ok()) return s;
    }
  } else if (!sketch.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": the checkpoint carries an admission sketch of ",
                                                      sketch.size(), " bytes; the table admits every key"));
  }
  index_ = std::move(index);
  blocks_ = std::move(blocks);
  if (admission_ != nullptr) admission_ = std::move(admission);
  return absl::OkStatus();
}

}  // namespace pstrain::server
