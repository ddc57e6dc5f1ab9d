#include "server/table_delta.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/le_bytes.h"
#include "server/table_format.h"

namespace pstrain::server {
namespace {

template <typename T>
absl::Status Same(absl::string_view where, absl::string_view field, const T& base, const T& delta) {
  if (base == delta) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(where, ": the delta is of another table: ", field, " ", delta, ", its base's ", base));
}

}  // namespace

absl::StatusOr<std::string> MergeTableDelta(absl::string_view base_bytes, absl::string_view delta_bytes,
                                            absl::string_view where) {
  ASSIGN_OR_RETURN(const TableBytes base, ParseTableBytes(base_bytes, absl::StrCat(where, " (base)")));
  ASSIGN_OR_RETURN(const TableBytes delta, ParseTableBytes(delta_bytes, absl::StrCat(where, " (delta)")));
  if (base.version == kTableVersionDelta) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": the base is a delta, not a whole table"));
  }
  if (delta.version != kTableVersionDelta) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the delta is a whole table (version ", delta.version, "), not a delta"));
  }
  RETURN_IF_ERROR(Same(where, "name", base.name, delta.name));
  RETURN_IF_ERROR(Same(where, "id", base.id, delta.id));
  RETURN_IF_ERROR(Same(where, "dim", base.dim, delta.dim));
  RETURN_IF_ERROR(Same(where, "optimizer type", base.optimizer_type, delta.optimizer_type));
  RETURN_IF_ERROR(Same(where, "record bytes", base.record_bytes, delta.record_bytes));
  RETURN_IF_ERROR(Same(where, "row dtype", TableRowDtype(base.row_dtype), TableRowDtype(delta.row_dtype)));
  RETURN_IF_ERROR(
      Same(where, "eviction metadata", TableSectionPresence(base.row_meta), TableSectionPresence(delta.row_meta)));
  RETURN_IF_ERROR(
      Same(where, "admission sketch", TableSectionPresence(base.sketch), TableSectionPresence(delta.sketch)));
  if (TableSectionPresent(delta.tombstones_lost)) {
    return absl::DataLossError(absl::StrCat(where,
                                            ": the delta lost tombstones past the cap; the rows they named "
                                            "cannot be dropped (a delta is never written so)"));
  }
  if (delta.tombstones.size() % kTableTombstoneBytes != 0) {
    return absl::DataLossError(absl::StrCat(where, ": tombstones of ", delta.tombstones.size(),
                                            " bytes, expected a multiple of ", kTableTombstoneBytes));
  }
  RETURN_IF_ERROR(CheckTableKeyOrder(base, where, "base"));
  RETURN_IF_ERROR(CheckTableKeyOrder(delta, where, "delta"));
  RETURN_IF_ERROR(CheckTableRowMeta(base, where, "base"));
  RETURN_IF_ERROR(CheckTableRowMeta(delta, where, "delta"));

  absl::flat_hash_set<uint64_t> gone;
  gone.reserve(delta.tombstones.size() / kTableTombstoneBytes);
  for (size_t at = 0; at < delta.tombstones.size(); at += kTableTombstoneBytes) {
    gone.insert(GetBytes<uint64_t>(delta.tombstones.data() + at));
  }
  // Which rows the result holds, in key order: (from the delta?, index there).
  std::vector<std::pair<bool, uint64_t>> merged;
  merged.reserve(base.num_rows + delta.num_rows);
  uint64_t i = 0, j = 0;
  while (i < base.num_rows || j < delta.num_rows) {
    const bool take_delta = i == base.num_rows || (j < delta.num_rows && delta.key(j) <= base.key(i));
    if (take_delta) {
      if (i < base.num_rows && base.key(i) == delta.key(j)) ++i;  // replaced
      merged.emplace_back(true, j++);
    } else {
      if (!gone.contains(base.key(i))) merged.emplace_back(false, i);
      ++i;
    }
  }

  std::string out;
  out.reserve(base_bytes.size() + delta_bytes.size());
  AppendTableHeader(base.version, base.id, base.dim, base.optimizer_type, base.record_bytes, base.name, merged.size(),
                    &out);
  for (const auto& [from_delta, at] : merged) {
    const absl::string_view row = from_delta ? delta.row(at) : base.row(at);
    out.append(row.data(), row.size());
  }
  // Sections in Serialize's order (embedding_table_io.cc WriteRows).
  auto copy = [&out](TableSection tag, absl::string_view payload) {
    if (TableSectionPresent(payload))
      AppendTableSection(
          tag, [&] { out.append(payload.data(), payload.size()); }, &out);
  };
  copy(kSketchSection, delta.sketch);
  if (TableSectionPresent(delta.row_meta)) {
    AppendTableSection(
        kRowMetaSection,
        [&] {
          for (const auto& [from_delta, at] : merged) {
            const absl::string_view meta = from_delta ? delta.row_meta : base.row_meta;
            out.append(meta.data() + at * kTableRowMetaBytes, kTableRowMetaBytes);
          }
        },
        &out);
  }
  copy(kTombstoneSection, delta.tombstones);
  copy(kClockSection, delta.clock);
  copy(kRowDtypeSection, delta.row_dtype);
  AppendTableCrc(0, &out);
  return out;
}

}  // namespace pstrain::server
