// RowsBeforeUpdate: the embedding rows one SYNC update changed, as they were just before it.
//
// A SYNC step that a membership change aborted on one server may already be applied on another
// (fault-tolerance.md, "Sync re-split"). The workers then compute the step again under the new
// view, and a worker's new slice holds samples it did not look up the first time: it pulls their
// rows for that step. A server that applied the step answers such a pull (PullRequest.step = its
// step - 1) with the rows as this record holds them, so the recomputed gradient, which the servers
// that aborted the step apply, is computed on the same rows as the step's first try. Read as they
// are now, the rows would carry the step's own update into its gradient.
//
// What it records: per table, the keys of the update's gradient (ascending, as SparseSum makes
// them) and their rows before the update, read as a pull reads them (a key without a row: its
// initial value). Rows that the same update's eviction or memory budget removed without a
// gradient are not recorded; they read as they are now.
//
// Cost: one copy of each updated row per SYNC step, made by the update itself where it has the row
// at hand (EmbeddingTable::Apply's values_before); the buffers are kept between steps, so a steady
// step allocates nothing here.
//
// Thread safety: none; the SparseShard calls it under the store's lock.
#ifndef PSTRAIN_SERVER_ROWS_BEFORE_UPDATE_H_
#define PSTRAIN_SERVER_ROWS_BEFORE_UPDATE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace pstrain::server {

class RowsBeforeUpdate {
 public:
  // Forgets the record: before an update's Adds, and after a restored checkpoint (no update
  // came before it).
  void Clear();

  // The record of table `id` (of `dim` floats per row) for the update's `keys` of it, to be filled
  // with their rows as they were (EmbeddingTable::Apply's values_before): keys.size() x dim floats.
  // REQUIRES: the keys are checked (owned by the shard, ascending); one call per table between two
  // Clears.
  absl::Span<float> Add(int id, absl::Span<const uint64_t> keys, int dim);

  // Drops table `id`'s record (its update failed and changed nothing: its rows read as now).
  void Forget(int id);

  // Overwrites, in `rows` (keys.size() x the table's dim floats, keys ascending), the rows of the
  // keys recorded for `table` with their recorded values; the other rows stay.
  void Overlay(int table, absl::Span<const uint64_t> keys, absl::Span<float> rows) const;

 private:
  struct Table {
    int dim = 0;
    std::vector<uint64_t> keys;  // ascending
    std::vector<float> rows;     // keys.size() x dim
  };
  std::vector<Table> tables_;  // by table id; tables without a record have no keys
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_ROWS_BEFORE_UPDATE_H_
