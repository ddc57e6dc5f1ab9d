// TableHistory: a server's tables summed per heartbeat, one point per spacing, and at most
// kMaxPoints per server however long the run, still spanning all of it.
#include "scheduler/table_history.h"

#include <cmath>

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

google::protobuf::RepeatedPtrField<TableUsage> Usages(int64_t rows) {
  google::protobuf::RepeatedPtrField<TableUsage> out;
  for (const char* name : {"user", "item"}) {
    TableUsage* u = out.Add();
    u->set_table(name);
    u->set_rows(rows);
    u->set_bytes(rows * 100);
    u->set_evicted(rows / 2);
  }
  return out;
}

TEST(TableHistoryTest, SumsAServersTablesOncePerSpacing) {
  TableHistory history;
  history.Add(1, 0.0, Usages(10));
  history.Add(1, 0.1, Usages(20));  // within the first spacing: not kept
  history.Add(1, 1.0, Usages(30));
  history.Add(0, 0.2, Usages(5));
  const std::vector<TableSizeSeries> series = history.Series();
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].server, 0);
  EXPECT_EQ(series[1].server, 1);
  ASSERT_EQ(series[1].points.size(), 2u);
  EXPECT_EQ(series[1].points[0].rows, 20);  // both tables
  EXPECT_EQ(series[1].points[1].rows, 60);
  EXPECT_EQ(series[1].points[1].bytes, 6000);
  EXPECT_EQ(series[1].points[1].evicted, 30);
  EXPECT_EQ(series[1].points[1].seconds, 1.0);
}

TEST(TableHistoryTest, StaysBoundedAndSpansTheWholeRun) {
  TableHistory history;
  // A day of heartbeats, two a second.
  for (int i = 0; i <= 2 * 86400; ++i) history.Add(0, i * 0.5, Usages(i));
  const std::vector<TableSizePoint> points = history.Series()[0].points;
  EXPECT_LE(points.size(), TableHistory::kMaxPoints);
  EXPECT_GE(points.size(), TableHistory::kMaxPoints / 2);
  EXPECT_EQ(points.front().seconds, 0.0);
  EXPECT_GE(points.back().seconds, 86400 - 86400.0 / TableHistory::kMaxPoints * 4);
  for (size_t i = 1; i < points.size(); ++i) EXPECT_GT(points[i].seconds, points[i - 1].seconds);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
