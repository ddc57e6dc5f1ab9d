// The embedding-table rows of one shard: for every table of the job (JobSpec.tables), the rows
// whose keys the key hash gives this shard (ServerOfKey(key, num_servers) == shard,
// common/key_hash.h), each an EmbeddingTable with its per-row optimizer.
//
// SparseStorage (server/sparse_storage.h) makes it one of the ParameterStore's storages, under the
// same protocol as the dense chunks: requests' SparseRows are checked here before the store takes
// its lock (Check, which also decodes the keys and copies a push's row gradients out of the
// received bytes, once), a SYNC step's gradients are summed with SparseSum and applied, pulls are
// answered with Read, and the tables go into checkpoints. Tables are updated at their optimizer's
// constant rate.
//
// Validation (Check) checks every entry against the job, not just its type: a table id the job
// declares, at most one entry per table, keys that are whole uint64s, strictly ascending and owned
// by this shard, rows of exactly keys x dim floats (or none, for a request of keys), and finite
// gradients. Messages say what, where and what was expected.
//
// Thread safety: none; the store calls everything but the layout methods (marked) under its lock.
#ifndef PSTRAIN_SERVER_SPARSE_SHARD_H_
#define PSTRAIN_SERVER_SPARSE_SHARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/buffer_pool.h"
#include "common/tensor_messages.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/embedding_table.h"
#include "server/rows_before_update.h"
#include "server/shard_storage.h"
#include "server/table_budget.h"

namespace pstrain::server {

using SparseList = google::protobuf::RepeatedPtrField<SparseRows>;

// One table's entry of a request, checked and decoded: keys strictly ascending and owned by the
// shard, and (a push's row gradients) keys x dim floats, or no rows (a request of keys). The
// bytes sit in pooled buffers (common/buffer_pool.h), so a steady stream of requests allocates
// nothing; move-only.
struct TableGradient {
  int table = 0;
  int64_t num_keys = 0;
  PooledBuffer key_bytes;  // num_keys uint64
  PooledBuffer row_bytes;  // num_keys x dim floats, or empty

  absl::Span<const uint64_t> keys() const {
    return {reinterpret_cast<const uint64_t*>(key_bytes.data()), static_cast<size_t>(num_keys)};
  }
  absl::Span<const float> rows() const { return {row_bytes.floats(), row_bytes.size() / sizeof(float)}; }
};
// A request's entries (one per table named), or a SYNC step's summed gradients.
using SparseGradient = std::vector<TableGradient>;

class SparseShard {
 public:
  // The shard `shard` of `num_shards` of every table in job.tables (after ApplyJobDefaults), with
  // the job's seed. INVALID_ARGUMENT for a table the EmbeddingTable refuses, naming it.
  static absl::StatusOr<std::unique_ptr<SparseShard>> Create(const JobSpec& job, int shard, int num_shards);

  // Layout: the number of tables (0 for a job without any).
  int num_tables() const { return static_cast<int>(tables_.size()); }
  // Layout: table `id`'s name and dim.
  const std::string& name(int id) const { return tables_[id]->name(); }
  int dim(int id) const { return tables_[id]->dim(); }

  // What a list must hold: keys only (a pull), or keys and rows (a push's gradients).
  enum class Expect { kKeys, kRows };
  // Layout: checks `list` (entries as received, see IncomingRows) as described above and decodes
  // it into *out, entry for entry: each entry's keys are copied out of the received bytes once,
  // and so are its rows with Expect::kRows; the finite check runs on that copy. INVALID_ARGUMENT
  // starting with `what` (*out is then unspecified). Touches no table, so it runs outside the lock.
  absl::Status Check(absl::string_view what, absl::Span<const IncomingRows> list, Expect expect, bool allow_nonfinite,
                     SparseGradient* out) const;

  // Which rows Read answers: as they are now, or as they were before the last
  // ApplyKeepingRowsBefore (server/rows_before_update.h; rows it did not change read as now).
  enum class ReadAt { kNow, kBeforeLastUpdate };
  // The rows of checked `keys` (rows never written read as their initial values, and are not
  // created): into one pooled buffer of *out, keys and rows of each entry, which the raw transport
  // sends as they are; or, in the second form, appended to `out` as protobuf entries.
  void Read(const SparseGradient& keys, OutgoingRowsAnswer* out, ReadAt at = ReadAt::kNow) const;
  void Read(const SparseGradient& keys, SparseList* out, ReadAt at = ReadAt::kNow) const;

  // One update of each table's rows in `grad` (checked, keys ascending; possibly none) at the
  // table's rate, as the store's update number `step` (for admission, EmbeddingTable::Apply), then
  // every table's eviction when due (EmbeddingTable::AfterUpdate), then the job's memory budget
  // (table_memory_budget, server/table_budget.h): past it, rows leave (EmbeddingTable::EvictToCap).
  void Apply(const SparseGradient& grad, int64_t step);
  // SYNC: Apply, after recording the rows of `grad`'s keys as they are (server/rows_before_update.h),
  // which Read(..., ReadAt::kBeforeLastUpdate) answers until the next update or Install.
  void ApplyKeepingRowsBefore(const SparseGradient& grad, int64_t step);
  // Update `step`, applied next, runs at the scheduler's time `unix_ms`: every table's eviction
  // clock (EmbeddingTable::AdvanceClock).
  void AdvanceClock(int64_t step, int64_t unix_ms);

  // Every table serialized (EmbeddingTable::Serialize), in table order, for a checkpoint.
  std::vector<std::string> Save() const;
  // Every table's rows changed since the last cut (EmbeddingTable::SerializeDelta), in table
  // order, for a delta checkpoint. REQUIRES: CanSaveDelta().
  std::vector<std::string> SaveDelta() const;
  // Whether every table can write a delta: it tracks its changes (the job writes deltas) and lost
  // no tombstone since the last cut.
  bool CanSaveDelta() const;
  // A checkpoint's cut: every table forgets the tombstones the checkpoint recorded and which rows
  // changed before it.
  void AfterCut();
  // Restores from Save's output in two steps, so a bad table changes nothing: Prepare builds new
  // tables (DATA_LOSS / FAILED_PRECONDITION from EmbeddingTable::Restore, naming the table;
  // FAILED_PRECONDITION for another number of tables), Install swaps them in. `step`: the
  // checkpoint's, whose last update rows without eviction metadata count as last updated by.
  class Prepared;
  absl::StatusOr<std::unique_ptr<Prepared>> Prepare(const std::vector<std::string>& tables, int64_t step) const;
  void Install(std::unique_ptr<Prepared> prepared);

  // Rows and bytes of each table, for logs and the run summary.
  using TableStats = server::TableStats;
  std::vector<TableStats> Stats() const;

 private:
  SparseShard(const JobSpec& job, int shard, int num_shards, std::vector<std::unique_ptr<EmbeddingTable>> tables);

  // Evicts past the memory budget after update `step`, when the job sets one.
  void KeepWithinBudget(int64_t step);
  // Apply, recording the rows as they were into `before` unless it is null.
  void ApplyRecording(const SparseGradient& grad, int64_t step, RowsBeforeUpdate* before);
  // Table `entry.table`'s rows of entry's keys into `out` (keys x dim floats), read `at`.
  void ReadRows(const TableGradient& entry, ReadAt at, absl::Span<float> out) const;

  JobSpec job_;
  int shard_;
  int num_shards_;
  std::vector<float> lr_;  // per table
  // Per table, as the memory budget counts it (server/table_budget.h): its costs, fixed by its
  // spec, and its rows, set at each update.
  std::vector<BudgetedTable> budgeted_;
  std::vector<std::unique_ptr<EmbeddingTable>> tables_;
  // SYNC: the rows the last update changed, as they were before it.
  RowsBeforeUpdate before_;
};

class SparseShard::Prepared {
 public:
  explicit Prepared(std::vector<std::unique_ptr<EmbeddingTable>> tables) : tables(std::move(tables)) {}
  std::vector<std::unique_ptr<EmbeddingTable>> tables;
};

// SYNC: the weighted sum of a step's row gradients, per key, in the order they are added (the
// store adds workers in ascending rank), so the result is bitwise repeatable whatever the arrival
// order. Keeps its buffers between steps.
class SparseSum {
 public:
  // REQUIRES: dims[t] is table t's dim.
  explicit SparseSum(std::vector<int> dims);

  // Adds weight x every row of `grad`.
  void Add(const SparseGradient& grad, float weight);
  // The sum so far, keys ascending per table (tables without rows are left out), and a reset.
  SparseGradient Take();

 private:
  struct Table {
    absl::flat_hash_map<uint64_t, uint32_t> index;  // key -> row of `sum`
    std::vector<uint64_t> keys;                     // in first-seen order
    std::vector<float> sum;
    std::vector<uint32_t> order;  // Take's sort, kept for its capacity
  };
  std::vector<int> dims_;
  std::vector<Table> tables_;
};

// The job's tables (after ApplyJobDefaults), empty, as every server builds them: table t of
// JobSpec.tables with id t, the job's seed and its optimizer. INVALID_ARGUMENT as
// EmbeddingTable::Create. Also for tools that train with in-process tables (bench/).
absl::StatusOr<std::vector<std::unique_ptr<EmbeddingTable>>> MakeJobTables(const JobSpec& job);

// The SparseRows of `table` (a job table id) in a list, or nullptr.
const SparseRows* FindTable(const SparseList& list, int table);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SPARSE_SHARD_H_
