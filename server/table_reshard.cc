#include "server/table_reshard.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "common/status_macros.h"
#include "common/table_spec.h"
#include "server/le_bytes.h"
#include "server/table_format.h"

namespace pstrain::server {
namespace {

std::string Which(size_t part) { return absl::StrCat("server ", part, "'s"); }

template <typename T>
absl::Status Same(absl::string_view where, size_t part, absl::string_view field, const T& first, const T& other) {
  if (first == other) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(where, ": ", Which(part), " table is another table: ", field, " ", other, ", server 0's ", first));
}

struct Tombstone {
  uint64_t key;
  int64_t update;
};

// The merged ttl clock (see the header): UpdateClock's bytes, int64 now, uint64 count, then
// (int64 update, int64 unix_ms) samples.
absl::StatusOr<std::string> MergeClocks(const std::vector<TableBytes>& tables, absl::string_view where) {
  struct Clock {
    int64_t now;
    std::vector<std::pair<int64_t, int64_t>> samples;  // (update, unix_ms), ascending
  };
  std::vector<Clock> clocks;
  std::vector<int64_t> updates;
  int64_t now = 0;
  for (size_t p = 0; p < tables.size(); ++p) {
    const absl::string_view c = tables[p].clock;
    constexpr size_t kHeader = 2 * sizeof(int64_t), kSample = 2 * sizeof(int64_t);
    if (c.size() < kHeader || (c.size() - kHeader) % kSample != 0 ||
        GetBytes<uint64_t>(c.data() + sizeof(int64_t)) != (c.size() - kHeader) / kSample) {
      return absl::DataLossError(absl::StrCat(where, ": ", Which(p), " eviction clock of ", c.size(),
                                              " bytes, expected 16 plus 16 a sample as its count says"));
    }
    Clock& clock = clocks.emplace_back();
    clock.now = GetBytes<int64_t>(c.data());
    for (size_t at = kHeader; at < c.size(); at += kSample) {
      clock.samples.emplace_back(GetBytes<int64_t>(c.data() + at), GetBytes<int64_t>(c.data() + at + sizeof(int64_t)));
      updates.push_back(clock.samples.back().first);
    }
    now = std::max(now, clock.now);
  }
  std::sort(updates.begin(), updates.end());
  updates.erase(std::unique(updates.begin(), updates.end()), updates.end());
  // The latest time any clock gives for update u: monotone in u.
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (int64_t u : updates) {
    int64_t at = 0;
    for (const Clock& clock : clocks) {
      auto it = std::lower_bound(clock.samples.begin(), clock.samples.end(), std::make_pair(u, INT64_MIN));
      at = std::max(at, it == clock.samples.end() ? clock.now : it->second);
    }
    if (at <= 0) continue;
    // A later update with the same time says more: it replaces the earlier sample.
    while (!merged.empty() && merged.back().second >= at) merged.pop_back();
    merged.emplace_back(u, at);
  }
  std::string out;
  PutBytes<int64_t>(now, &out);
  PutBytes<uint64_t>(merged.size(), &out);
  for (const auto& [u, ms] : merged) {
    PutBytes<int64_t>(u, &out);
    PutBytes<int64_t>(ms, &out);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReshardTable(const std::vector<absl::string_view>& parts, int num_servers, int rank,
                                         absl::string_view where, ReshardCounts* counts) {
  if (parts.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no servers' tables to re-cut"));
  std::vector<TableBytes> tables;
  for (size_t p = 0; p < parts.size(); ++p) {
    ASSIGN_OR_RETURN(TableBytes t, ParseTableBytes(parts[p], absl::StrCat(where, " (", Which(p), ")")));
    if (t.version == kTableVersionDelta) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": ", Which(p), " table is a delta; read it through its chain first"));
    }
    RETURN_IF_ERROR(CheckTableKeyOrder(t, where, Which(p)));
    RETURN_IF_ERROR(CheckTableRowMeta(t, where, Which(p)));
    if (t.tombstones.size() % kTableTombstoneBytes != 0) {
      return absl::DataLossError(absl::StrCat(where, ": ", Which(p), " tombstones of ", t.tombstones.size(),
                                              " bytes, expected a multiple of ", kTableTombstoneBytes));
    }
    if (TableSectionPresent(t.tombstones_lost) && t.tombstones_lost.size() != sizeof(uint64_t)) {
      return absl::DataLossError(absl::StrCat(where, ": ", Which(p), " count of lost tombstones of ",
                                              t.tombstones_lost.size(), " bytes, expected 8"));
    }
    if (!tables.empty()) {
      const TableBytes& first = tables.front();
      RETURN_IF_ERROR(Same(where, p, "name", first.name, t.name));
      RETURN_IF_ERROR(Same(where, p, "id", first.id, t.id));
      RETURN_IF_ERROR(Same(where, p, "dim", first.dim, t.dim));
      RETURN_IF_ERROR(Same(where, p, "optimizer type", first.optimizer_type, t.optimizer_type));
      RETURN_IF_ERROR(Same(where, p, "record bytes", first.record_bytes, t.record_bytes));
      RETURN_IF_ERROR(Same(where, p, "row dtype", TableRowDtype(first.row_dtype), TableRowDtype(t.row_dtype)));
      RETURN_IF_ERROR(
          Same(where, p, "eviction metadata", TableSectionPresence(first.row_meta), TableSectionPresence(t.row_meta)));
      RETURN_IF_ERROR(
          Same(where, p, "eviction clock", TableSectionPresence(first.clock), TableSectionPresence(t.clock)));
      RETURN_IF_ERROR(
          Same(where, p, "admission sketch", TableSectionPresence(first.sketch), TableSectionPresence(t.sketch)));
      RETURN_IF_ERROR(Same(where, p, "admission sketch bytes", first.sketch.size(), t.sketch.size()));
    }
    tables.push_back(t);
  }
  const TableBytes& first = tables.front();

  // The kept rows, in key order: (key, part, index there).
  struct Kept {
    uint64_t key;
    size_t part;
    uint64_t at;
  };
  std::vector<Kept> kept;
  for (size_t p = 0; p < tables.size(); ++p) {
    for (uint64_t i = 0; i < tables[p].num_rows; ++i) {
      const uint64_t key = tables[p].key(i);
      if (ServerOfKey(key, num_servers) == rank) kept.push_back({key, p, i});
    }
  }
  std::sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) { return a.key < b.key; });
  for (size_t k = 1; k < kept.size(); ++k) {
    if (kept[k].key == kept[k - 1].key) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": key ", kept[k].key, " has a row on both server ",
                                                     kept[k - 1].part, " and server ", kept[k].part,
                                                     "; expected each key on one server of the cut"));
    }
  }

  if (counts != nullptr) {
    const int64_t row_bytes =
        8 + static_cast<int64_t>(first.record_bytes) + (TableSectionPresent(first.row_meta) ? kTableRowMetaBytes : 0);
    for (const Kept& k : kept) {
      const bool moved = static_cast<int>(k.part) != rank;
      counts->rows += 1;
      counts->bytes += row_bytes;
      counts->rows_moved += moved ? 1 : 0;
      counts->bytes_moved += moved ? row_bytes : 0;
    }
  }
  std::string out;
  AppendTableHeader(first.version, first.id, first.dim, first.optimizer_type, first.record_bytes, first.name,
                    kept.size(), &out);
  for (const Kept& k : kept) {
    const absl::string_view row = tables[k.part].row(k.at);
    out.append(row.data(), row.size());
  }
  // Sections in Serialize's order (embedding_table_io.cc WriteRows).
  if (TableSectionPresent(first.sketch)) {
    AppendTableSection(
        kSketchSection,
        [&] {
          for (size_t b = 0; b < first.sketch.size(); ++b) {
            int sum = 0;
            for (const TableBytes& t : tables) sum += static_cast<uint8_t>(t.sketch[b]);
            out.push_back(static_cast<char>(std::min(sum, 255)));
          }
        },
        &out);
  }
  if (TableSectionPresent(first.row_meta)) {
    AppendTableSection(
        kRowMetaSection,
        [&] {
          for (const Kept& k : kept)
            out.append(tables[k.part].row_meta.data() + k.at * kTableRowMetaBytes, kTableRowMetaBytes);
        },
        &out);
  }
  if (TableSectionPresent(first.tombstones)) {
    std::vector<Tombstone> dead;
    uint64_t lost = 0;
    for (const TableBytes& t : tables) {
      for (size_t at = 0; at < t.tombstones.size(); at += kTableTombstoneBytes) {
        const Tombstone d{GetBytes<uint64_t>(t.tombstones.data() + at),
                          GetBytes<int64_t>(t.tombstones.data() + at + sizeof(uint64_t))};
        if (ServerOfKey(d.key, num_servers) == rank) dead.push_back(d);
      }
      if (TableSectionPresent(t.tombstones_lost)) lost += GetBytes<uint64_t>(t.tombstones_lost.data());
    }
    std::stable_sort(dead.begin(), dead.end(),
                     [](const Tombstone& a, const Tombstone& b) { return a.update < b.update; });
    if (dead.size() > static_cast<size_t>(kMaxTableTombstones)) {
      const size_t drop = dead.size() - kMaxTableTombstones;
      dead.erase(dead.begin(), dead.begin() + drop);
      lost += drop;
    }
    AppendTableSection(
        kTombstoneSection,
        [&] {
          for (const Tombstone& d : dead) {
            PutBytes<uint64_t>(d.key, &out);
            PutBytes<int64_t>(d.update, &out);
          }
        },
        &out);
    if (lost > 0)
      AppendTableSection(
          kTombstonesLostSection, [&] { PutBytes<uint64_t>(lost, &out); }, &out);
  }
  if (TableSectionPresent(first.clock)) {
    ASSIGN_OR_RETURN(const std::string clock, MergeClocks(tables, where));
    AppendTableSection(
        kClockSection, [&] { out.append(clock); }, &out);
  }
  if (TableSectionPresent(first.row_dtype)) {
    AppendTableSection(
        kRowDtypeSection, [&] { out.append(first.row_dtype.data(), first.row_dtype.size()); }, &out);
  }
  AppendTableCrc(0, &out);
  return out;
}

}  // namespace pstrain::server
