#include "server/table_budget.h"

#include <algorithm>
#include <numeric>

namespace pstrain::server {

int64_t BudgetedBytes(absl::Span<const BudgetedTable> tables) {
  int64_t bytes = 0;
  for (const BudgetedTable& t : tables) bytes += t.fixed_bytes + t.rows * t.row_bytes;
  return bytes;
}

std::vector<int64_t> BudgetCaps(int64_t budget, absl::Span<const BudgetedTable> tables) {
  if (BudgetedBytes(tables) <= budget) return {};
  int64_t fixed = 0;
  for (const BudgetedTable& t : tables) fixed += t.fixed_bytes;
  std::vector<int64_t> caps(tables.size(), 0);
  if (fixed >= budget) return caps;
  // The rows may take nine tenths of what the fixed bytes leave.
  int64_t available = (budget - fixed) / 10 * 9;
  // Water-filling by bytes: the tables by their rows' bytes, smallest first (ties by position);
  // each keeps its rows while they fit an equal share of what is left.
  std::vector<size_t> order(tables.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto bytes = [&](size_t i) { return tables[i].rows * tables[i].row_bytes; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes(a) < bytes(b); });
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const int64_t share = available / static_cast<int64_t>(order.size() - k);
    caps[i] = std::min(tables[i].rows, share / tables[i].row_bytes);
    available -= caps[i] * tables[i].row_bytes;
  }
  return caps;
}

}  // namespace pstrain::server
