// EmbeddingTable::Serialize and Restore: the table's checkpoint format (see embedding_table.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/table_spec.h"
#include "server/embedding_table.h"
#include "server/le_bytes.h"
#include "server/table_format.h"

namespace pstrain::server {

void EmbeddingTable::Serialize(std::string* out) const {
  std::vector<std::pair<uint64_t, uint32_t>> rows;
  rows.reserve(index_.size());
  for (const KeyRow& s : index_) rows.emplace_back(uint64_t{s.key}, uint32_t{s.row});
  WriteRows(std::move(rows), /*delta=*/false, out);
}

void EmbeddingTable::SerializeDelta(std::string* out) const {
  CHECK(options_.track_changes) << "table '" << name() << "': SerializeDelta without track_changes";
  std::vector<std::pair<uint64_t, uint32_t>> rows;
  for (const KeyRow& s : index_) {
    if (Changed(s.row)) rows.emplace_back(uint64_t{s.key}, uint32_t{s.row});
  }
  WriteRows(std::move(rows), /*delta=*/true, out);
}

void EmbeddingTable::WriteRows(std::vector<std::pair<uint64_t, uint32_t>> rows, bool delta, std::string* out) const {
  const size_t start = out->size();
  const uint32_t record_bytes = static_cast<uint32_t>(record_floats_ * sizeof(float));
  std::sort(rows.begin(), rows.end());
  out->reserve(start + 44 + options_.name.size() + rows.size() * (8 + record_bytes));
  const bool with_sketch = admission_ != nullptr && admission_->has_state();
  const bool half = options_.row_dtype != TableSpec::FP32;
  const bool sections = with_sketch || eviction_ != nullptr || half;
  const uint32_t version = delta ? kTableVersionDelta : (sections ? kTableVersionSections : kTableVersionRows);
  AppendTableHeader(version, options_.id, options_.dim, static_cast<int32_t>(options_.optimizer.type), record_bytes,
                    options_.name, rows.size(), out);
  for (const auto& [key, row] : rows) {
    PutBytes<uint64_t>(key, out);
    out->append(reinterpret_cast<const char*>(Record(row)), record_bytes);
  }
  if (with_sketch)
    AppendTableSection(
        kSketchSection, [&] { admission_->Serialize(out); }, out);
  if (eviction_ != nullptr) {
    std::vector<uint32_t> order;
    order.reserve(rows.size());
    for (const auto& [key, row] : rows) order.push_back(row);
    AppendTableSection(
        kRowMetaSection, [&] { eviction_->SerializeRows(order, out); }, out);
    AppendTableSection(
        kTombstoneSection, [&] { eviction_->SerializeTombstones(out); }, out);
    if (eviction_->tombstones_lost() > 0) {
      AppendTableSection(
          kTombstonesLostSection, [&] { eviction_->SerializeTombstonesLost(out); }, out);
    }
    if (eviction_->clock() != nullptr)
      AppendTableSection(
          kClockSection, [&] { eviction_->SerializeClock(out); }, out);
  }
  if (half) {
    AppendTableSection(
        kRowDtypeSection, [&] { PutBytes<uint32_t>(static_cast<uint32_t>(options_.row_dtype), out); }, out);
  }
  AppendTableCrc(start, out);
}

absl::Status EmbeddingTable::Restore(absl::string_view data, int64_t last_update) {
  const std::string where = absl::StrCat("restore of table '", options_.name, "'");
  ASSIGN_OR_RETURN(const TableBytes t, ParseTableBytes(data, where));
  if (t.version == kTableVersionDelta) {
    return absl::FailedPreconditionError(
        absl::StrCat(where,
                     ": the buffer is a delta (the rows changed since a cut), not a whole table; merge it onto "
                     "its base first (server/table_delta.h)"));
  }
  if (t.name != options_.name || t.id != options_.id) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " (id ", options_.id, "): the checkpoint is of table '", t.name, "' (id ", t.id, ")"));
  }
  if (t.dim != options_.dim) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": checkpoint dim ", t.dim, ", table dim ", options_.dim));
  }
  if (t.optimizer_type != static_cast<int32_t>(options_.optimizer.type)) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": checkpoint optimizer ",
                     SparseOptimizerName(static_cast<SparseOptimizerOptions::Type>(t.optimizer_type)), " (",
                     t.optimizer_type, "), table optimizer ", SparseOptimizerName(options_.optimizer.type)));
  }
  const absl::string_view sketch = t.sketch, row_meta = t.row_meta, tombstones = t.tombstones,
                          tombstones_lost = t.tombstones_lost, row_dtype = t.row_dtype, clock = t.clock;
  const uint64_t num_rows = t.num_rows;
  const uint32_t record_bytes = t.record_bytes;
  const char* p = t.rows.data();
  // The dtype before the record size, which it changes: a checkpoint of another dtype is another
  // table's, not a corrupt one.
  if (!row_dtype.empty() && row_dtype.size() != sizeof(uint32_t)) {
    return absl::DataLossError(
        absl::StrCat(where, ": a row dtype section of ", row_dtype.size(), " bytes, expected 4"));
  }
  const auto dtype =
      row_dtype.empty() ? TableSpec::FP32 : static_cast<TableSpec::RowDtype>(GetBytes<uint32_t>(row_dtype.data()));
  if (dtype != options_.row_dtype) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": checkpoint row dtype ", RowDtypeName(dtype),
                                                      ", table row dtype ", RowDtypeName(options_.row_dtype)));
  }
  const size_t expected_record = record_floats_ * sizeof(float);
  if (record_bytes != expected_record) {
    return absl::DataLossError(absl::StrCat(where, ": record of ", record_bytes, " bytes, expected ", expected_record));
  }

  // Build the new rows aside and swap them in, so an error leaves the table as it was.
  Index index;
  index.reserve(num_rows);
  std::vector<float> check(options_.dim);
  std::vector<std::unique_ptr<float[]>> blocks;
  for (uint64_t row = 0; row < num_rows; ++row) {
    const uint64_t key = GetBytes<uint64_t>(p);
    if (row > 0 && key <= GetBytes<uint64_t>(p - 8 - record_bytes)) {
      return absl::DataLossError(
          absl::StrCat(where, ": row ", row, " key ", key, " is not greater than the key before it"));
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
                                                      admission == nullptr ? "admits every key" : "keeps no sketch"));
  }
  if (keeps_sketch && sketch.data() != nullptr) {
    if (absl::Status s = admission->Restore(where, sketch); !s.ok()) return s;
  }
  if (eviction != nullptr) {
    if (absl::Status s = eviction->Restore(where, num_rows, row_meta, tombstones, tombstones_lost, clock, last_update);
        !s.ok())
      return s;
  }
  index_ = std::move(index);
  blocks_ = std::move(blocks);
  num_records_ = static_cast<uint32_t>(num_rows);
  free_rows_.clear();
  changed_.clear();  // a restored table stands at its checkpoint's cut
  admission_ = std::move(admission);
  eviction_ = std::move(eviction);
  return absl::OkStatus();
}

}  // namespace pstrain::server
