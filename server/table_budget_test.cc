#include "server/table_budget.h"

#include <vector>

#include <gtest/gtest.h>

namespace pstrain::server {
namespace {

TEST(TableBudgetTest, WithinTheBudgetNothingIsCut) {
  const std::vector<BudgetedTable> tables = {{100, 10, 1000}, {50, 20, 500}};
  EXPECT_EQ(BudgetedBytes(tables), 1000 + 1000 + 500 + 1000);
  EXPECT_TRUE(BudgetCaps(3500, tables).empty());
}

// Past the budget the rows may take nine tenths of what the fixed bytes leave, shared max-min
// fairly: the small table keeps its rows, the large ones share the rest equally by bytes.
TEST(TableBudgetTest, PastTheBudgetSmallTablesKeepTheirRowsAndLargeOnesShare) {
  // Fixed 1000 in all; budget 11000 leaves 10000, of which rows may take 9000.
  const std::vector<BudgetedTable> tables = {{1000, 10, 400}, {20, 10, 300}, {400, 40, 300}};
  const std::vector<int64_t> caps = BudgetCaps(11000, tables);
  // Table 1 needs 200 bytes (< 9000 / 3) and keeps all; 8800 left: 4400 each for tables 0 and 2.
  EXPECT_EQ(caps, (std::vector<int64_t>{440, 20, 110}));
  std::vector<BudgetedTable> after = tables;
  for (size_t t = 0; t < after.size(); ++t) after[t].rows = caps[t];
  EXPECT_LE(BudgetedBytes(after), 1000 + 9000);
}

TEST(TableBudgetTest, ATableUnderItsShareLeavesTheRestToTheOthers) {
  // Rows may take (2000 - 0) * 9 / 10 = 1800: table 0 needs 100 of its 600 share, so tables 1
  // and 2 get 850 each, table 2 capped by its own 500 bytes, which leaves 1200 to table 1.
  const std::vector<BudgetedTable> tables = {{10, 10, 0}, {300, 10, 0}, {50, 10, 0}};
  EXPECT_EQ(BudgetCaps(2000, tables), (std::vector<int64_t>{10, 120, 50}));
}

TEST(TableBudgetTest, FixedBytesAtTheBudgetLeaveNoRows) {
  const std::vector<BudgetedTable> tables = {{10, 10, 600}, {10, 10, 500}};
  EXPECT_EQ(BudgetCaps(1100, tables), (std::vector<int64_t>{0, 0}));
}

TEST(TableBudgetTest, TiesAreBrokenByPositionSoCapsAreRepeatable) {
  const std::vector<BudgetedTable> tables = {{100, 10, 0}, {100, 10, 0}, {100, 10, 0}};
  // 1000 * 9 / 10 = 900 over three equal tables: 300 bytes, 30 rows each.
  EXPECT_EQ(BudgetCaps(1000, tables), (std::vector<int64_t>{30, 30, 30}));
}

}  // namespace
}  // namespace pstrain::server
