// TableBudget: keeps a server's shard of the embedding tables within a memory budget
// (JobSpec.table_memory_budget, --table_memory_budget): how many rows each table may keep.
//
// The budget counts each table as fixed bytes (a block of rows not yet used, admission's sketch,
// the most tombstones eviction keeps) plus its rows at a per-row cost (common/table_spec.h:
// TableBudgetFixedBytes, TableBudgetRowBytes), an upper bound of what the table holds. When, after
// an update, the count exceeds the budget, the rows it may keep are cut to nine tenths of what the
// fixed bytes leave of it (so that the next pass comes after the rows have grown by a tenth, not
// after every update), and
// shared out max-min fairly by bytes: a table whose rows need less than an equal share keeps them
// all, and what it leaves over is shared among the others, which each keep an equal number of
// bytes' worth of rows. So a small table is never starved by a large one, and the largest ones
// give way first.
//
// BudgetCaps depends only on the tables' row counts, so a replica (which applies the same
// updates) and a server restored from a checkpoint (which carries the rows and their
// eviction metadata)
// compute the same caps after the same update, and evict the same rows
// (EmbeddingTable::EvictToCap picks them by the table's order: LRU unless the table says LFU).
//
// Thread safety: a pure function.
#ifndef PSTRAIN_SERVER_TABLE_BUDGET_H_
#define PSTRAIN_SERVER_TABLE_BUDGET_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace pstrain::server {

// One table's shard as the budget counts it.
struct BudgetedTable {
  int64_t rows = 0;
  int64_t row_bytes = 0;    // > 0: TableBudgetRowBytes
  int64_t fixed_bytes = 0;  // TableBudgetFixedBytes
};

// The tables' bytes as the budget counts them.
int64_t BudgetedBytes(absl::Span<const BudgetedTable> tables);

// Empty when the tables are within `budget` bytes; otherwise the rows each table may keep (in the
// tables' order), which bring them within the mark above. A cap is never above the table's rows;
// every cap is 0 when the fixed bytes alone reach the budget. REQUIRES: budget > 0.
std::vector<int64_t> BudgetCaps(int64_t budget, absl::Span<const BudgetedTable> tables);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_TABLE_BUDGET_H_
