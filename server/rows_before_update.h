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
// Cost: one read of the update's rows per SYNC step (a lookup and a copy per key); the buffers are
// kept between steps, so a steady step allocates nothing here.
//
// Thread safety: none; the SparseShard calls it under the store's lock.
#ifndef PSTRAIN_SERVER_ROWS_BEFORE_UPDATE_H_
#define PSTRAIN_SERVER_ROWS_BEFORE_UPDATE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "server/embedding_table.h"

namespace pstrain::server {

class RowsBeforeUpdate {
 public:
  // Forgets the record: before an update's Adds, and after a restored checkpoint (no update
  // came before it).
  void Clear();

  // Records the rows `table` (job table id `id`) reads now for `keys`, the update's keys of that
  // table. REQUIRES: the keys are checked (owned by the shard, ascending); one Add per table
  // between two Clears.
  void Add(int id, absl::Span<const uint64_t> keys, const EmbeddingTable& table);

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
