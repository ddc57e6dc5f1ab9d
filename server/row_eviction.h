// RowEviction: which rows of an embedding table leave (TableSpec.eviction, proto/job.proto), and
// what the table must remember to decide it: per row, the update that last touched it and how many
// did; per eviction, a tombstone (key, update).
//
//   ttl_updates = T     a row not updated in the last T updates leaves
//   ttl_seconds = S     (ASYNC/SSP) a row not updated in the last S seconds of the scheduler's
//                       clock leaves (server/update_clock.h: the clock, and how late a row may go)
//   min_l2_norm = m     a row whose value's L2 norm is below m leaves (FTRL's zeroed rows)
//   max_rows = R        past R rows, rows leave in `order` until R remain:
//                         LRU  the least recently updated first
//                         LFU  the least often updated first, then the least recently
//                       ties by ascending key
//   keep_rows = K       never fewer than K rows: of the rows the rules pick, those that come first
//                       in the same order leave
//
// Eviction runs after update u when (u + 1) is a multiple of every_updates, on the table's update
// clock (the store's update numbers: SYNC steps, ASYNC/SSP applied pushes). It depends only on the
// rows, their metadata and u, so a replica (which applies the same updates) and a repeated SYNC run
// evict exactly the same rows, and so does a server restored from a checkpoint, which carries the
// metadata.
//
// Cost: 12 bytes a row (the last update as int64, the count as uint32; in chunks of 1,024 rows)
// and, each time it runs, a pass over the metadata in row order for the TTL rules (a bit a row),
// a walk over the rows for their keys (a second one past the cap, keeping a heap of the rows it
// will take) and a sort of those leaving; memory for the bits and those rows, not a row's worth
// for every row.
// Tombstones: only while something records them (keep_tombstones: the job checkpoints), the
// evictions since the last checkpoint's cut. A checkpoint records them (delta checkpoints and a
// serving path are to read them to drop the rows elsewhere), and its cut drops them from memory
// (DropTombstones), so they stay bounded by the evictions between two checkpoints. At most
// kMaxTombstones (65,536, 1 MiB) per table are held: past that the oldest go, and the checkpoint
// records how many went (tombstones_lost), so that a reader knows its list is incomplete. The
// table's counters count every eviction either way. A tombstone says the key left at its update;
// a row of the same key in the checkpoint came back after it and supersedes it.
//
// Thread safety: none; the table that owns it serializes calls.
#ifndef PSTRAIN_SERVER_ROW_EVICTION_H_
#define PSTRAIN_SERVER_ROW_EVICTION_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/table_spec.h"
#include "proto/job.pb.h"
#include "server/update_clock.h"

namespace pstrain::server {

// A row that left: its key and the update after which it did.
struct Tombstone {
  uint64_t key = 0;
  int64_t update = 0;
  bool operator==(const Tombstone& o) const { return key == o.key && update == o.update; }
};

// Per-row values in chunks of kChunk rows: growing never copies, and holds at most one chunk
// beyond the rows (a vector's doubling would hold up to twice them).
template <typename T>
class RowArray {
 public:
  static constexpr size_t kChunk = 1024;
  size_t size() const { return chunks_.size() * kChunk; }
  // Grows to at least n values, new ones `fill`.
  void GrowTo(size_t n, T fill) {
    while (size() < n) {
      chunks_.push_back(std::make_unique<T[]>(kChunk));
      std::fill_n(chunks_.back().get(), kChunk, fill);
    }
  }
  T& operator[](size_t i) { return chunks_[i / kChunk][i % kChunk]; }
  const T& operator[](size_t i) const { return chunks_[i / kChunk][i % kChunk]; }
  int64_t bytes_used() const {
    return static_cast<int64_t>(size() * sizeof(T) + chunks_.capacity() * sizeof(chunks_[0]));
  }

 private:
  std::vector<std::unique_ptr<T[]>> chunks_;
};

class RowEviction {
 public:
  static constexpr size_t kMaxTombstones = kMaxTableTombstones;  // common/table_spec.h

  // The policy of `spec` (after ApplyTableDefaults). INVALID_ARGUMENT as ValidateEviction
  // (common/table_spec.h), its fields prefixed with `what`.
  // `keep_tombstones`: record a tombstone per eviction (see above).
  static absl::StatusOr<std::unique_ptr<RowEviction>> Create(absl::string_view what, const EvictionSpec& spec,
                                                             bool keep_tombstones);

  const EvictionSpec& spec() const { return spec_; }

  // Row number `row` (new, or reused after an eviction) was created by update `update`.
  void Created(uint32_t row, int64_t update);
  // Row `row` was updated by update `update` (after Created, for a new row).
  void Updated(uint32_t row, int64_t update);
  // Update `update` runs at the scheduler's time `unix_ms` (0: none): ttl_seconds's clock. Call
  // before the update touches rows. Does nothing without ttl_seconds.
  void AdvanceClock(int64_t update, int64_t unix_ms) {
    if (clock_ != nullptr) clock_->Advance(update, unix_ms);
  }
  // The clock (null without ttl_seconds).
  const UpdateClock* clock() const { return clock_.get(); }
  // Starts fetching row `row`'s metadata into the cache, for an Updated a few rows later (rows are
  // random accesses, like their records).
  void Prefetch(uint32_t row) const {
    if (row < meta_.size()) __builtin_prefetch(&meta_[row]);
  }
  // Whether eviction runs after update `update` (never when the spec has no rule: a table under a
  // memory budget keeps the metadata for SelectPastCap only).
  bool Due(int64_t update) const { return spec_.every_updates() > 0 && (update + 1) % spec_.every_updates() == 0; }

  // A row: its key and row number.
  using Row = std::pair<uint64_t, uint32_t>;
  // Calls its argument with (key, row number) for every row of the table, in any order.
  using RowVisitor = std::function<void(const std::function<void(uint64_t, uint32_t)>&)>;
  // The rows that leave after update `update`, in the order they leave (see above), among the
  // table's `num_rows` rows, which `for_each_row` visits (at most twice); `norm` gives a row's
  // value's L2 norm. Holds only the rows the rules pick and, past the cap, the ones it takes.
  std::vector<Row> Select(int64_t update, int64_t num_rows, const RowVisitor& for_each_row,
                          const std::function<double(uint32_t)>& norm) const;
  // The rows that leave when the table may keep only `cap` of its `num_rows` rows (a server's
  // memory budget, server/table_budget.h): the first in the order max_rows uses, and never so
  // many that fewer than keep_rows remain.
  std::vector<Row> SelectPastCap(int64_t cap, int64_t num_rows, const RowVisitor& for_each_row) const;
  // Records that `key` left after update `update`.
  void Evicted(uint64_t key, int64_t update);

  const std::deque<Tombstone>& tombstones() const { return tombstones_; }
  // Evictions since the last DropTombstones whose tombstones went to stay within kMaxTombstones.
  int64_t tombstones_lost() const { return tombstones_lost_; }
  // A checkpoint recorded the tombstones: forgets them (and the count of lost ones).
  void DropTombstones();
  // Heap bytes held: the metadata and the tombstones.
  int64_t bytes_used() const;

  // Checkpoints. The metadata of `rows` (row numbers, in the order the table writes its rows):
  // per row an int64 last update and a uint32 count, little-endian.
  void SerializeRows(const std::vector<uint32_t>& rows, std::string* out) const;
  // The tombstones, oldest first: per tombstone a uint64 key and an int64 update.
  void SerializeTombstones(std::string* out) const;
  // tombstones_lost() as a uint64 (written only when not 0).
  void SerializeTombstonesLost(std::string* out) const;
  // ttl_seconds's clock (UpdateClock::Serialize; written only with ttl_seconds).
  void SerializeClock(std::string* out) const;
  // Installs what Serialize* wrote for a table whose i-th row (in that order) gets row number i.
  // `rows` empty (a checkpoint without metadata): every row as last updated by update
  // `last_update` with no count; `lost` empty: none lost; `clock` empty: a clock that starts
  // again from the next push's time (ignored without ttl_seconds). DATA_LOSS (prefixed with
  // `what`) when a section's size does not fit `num_rows` or the clock is malformed; then nothing
  // changes.
  absl::Status Restore(absl::string_view what, uint64_t num_rows, absl::string_view rows, absl::string_view tombstones,
                       absl::string_view lost, absl::string_view clock, int64_t last_update);

 private:
  RowEviction(const EvictionSpec& spec, bool keep_tombstones);
  void Grow(uint32_t row);
  // By row number, whether the TTL rules (ttl_updates, ttl_seconds) pick the row after update
  // `update`; empty when neither rule is on or can pick a row yet.
  std::vector<bool> ExpiredRows(int64_t update) const;
  // Whether row a leaves before row b (the order above).
  // Sorts *rows in that order.
  void SortInOrder(std::vector<Row>* rows) const;
  bool Before(const Row& a, const Row& b) const;
  // A row's place in that order: (count under LFU, else 0; last update; key), compared in turn.
  struct OrderKey {
    uint32_t count;
    int64_t last;
    uint64_t key;
    bool operator<(const OrderKey& o) const { return std::tie(count, last, key) < std::tie(o.count, o.last, o.key); }
  };
  OrderKey KeyOf(const Row& r) const;
  // Appends to *leaving the first `over` rows in that order among those `skip` does not name,
  // sorted.
  void AppendFirst(size_t over, const RowVisitor& for_each_row, const std::function<bool(uint32_t)>& skip,
                   std::vector<Row>* leaving) const;

  const EvictionSpec spec_;
  // By row number: the update that last touched the row and how many did (saturating), side by
  // side (one cache line per row touched), packed into 12 bytes.
  struct __attribute__((packed)) RowMeta {
    int64_t last;
    uint32_t count;
  };
  static_assert(sizeof(RowMeta) == 12, "12 bytes a row");
  RowArray<RowMeta> meta_;
  const bool keep_tombstones_;
  // ttl_seconds's clock; null without it.
  std::unique_ptr<UpdateClock> clock_;
  std::deque<Tombstone> tombstones_;
  int64_t tombstones_lost_ = 0;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_ROW_EVICTION_H_
