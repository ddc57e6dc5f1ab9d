#include "server/applied_batches.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

using ::testing::ElementsAre;

std::vector<int64_t> Ids(const AppliedLeases& a) { return {a.lease_ids().begin(), a.lease_ids().end()}; }
std::vector<int64_t> Counts(const AppliedLeases& a) { return {a.batches().begin(), a.batches().end()}; }

TEST(AppliedBatchesTest, EachBatchOnceAndRepeatsSkipped) {
  AppliedBatches applied;
  EXPECT_TRUE(applied.Add(3, 0));
  EXPECT_TRUE(applied.Add(3, 1));
  EXPECT_FALSE(applied.Add(3, 0));
  EXPECT_FALSE(applied.Add(3, 1));
  EXPECT_TRUE(applied.Add(4, 0));
  EXPECT_EQ(applied.num_leases(), 2u);
}

TEST(AppliedBatchesTest, CountsOnlyBatchesWithNoGapBeforeThem) {
  AppliedBatches applied;
  ASSERT_TRUE(applied.Add(1, 0));
  ASSERT_TRUE(applied.Add(1, 2));  // Out of order: 1 is missing.
  ASSERT_TRUE(applied.Add(2, 1));  // Batch 0 missing: nothing to report for lease 2.
  EXPECT_FALSE(applied.Add(1, 2));
  AppliedLeases report;
  applied.Report(1, 100, &report);
  EXPECT_THAT(Ids(report), ElementsAre(1));
  EXPECT_THAT(Counts(report), ElementsAre(1));
  // Filling the gap counts the batch applied ahead of it too.
  ASSERT_TRUE(applied.Add(1, 1));
  ASSERT_TRUE(applied.Add(2, 0));
  report.Clear();
  applied.Report(1, 100, &report);
  EXPECT_THAT(Ids(report), ElementsAre(1, 2));
  EXPECT_THAT(Counts(report), ElementsAre(3, 2));
}

TEST(AppliedBatchesTest, ReportStartsAtTheAskedIdAndStopsAtTheLimit) {
  AppliedBatches applied;
  for (int64_t id = 1; id <= 10; ++id) ASSERT_TRUE(applied.Add(id, 0));
  AppliedLeases report;
  applied.Report(4, 3, &report);
  EXPECT_THAT(Ids(report), ElementsAre(4, 5, 6));
  EXPECT_THAT(Counts(report), ElementsAre(1, 1, 1));
  applied.Clear();
  report.Clear();
  applied.Report(1, 100, &report);
  EXPECT_EQ(report.lease_ids_size(), 0);
  EXPECT_TRUE(applied.Add(1, 0));  // A new data epoch: the same lease id is new again.
}

TEST(AppliedBatchesTest, AppliedOnBothKeepsCommonLeasesWithTheSmallerCount) {
  AppliedBatches own, copy;
  for (int64_t b = 0; b < 4; ++b) ASSERT_TRUE(own.Add(1, b));
  for (int64_t b = 0; b < 2; ++b) ASSERT_TRUE(copy.Add(1, b));
  ASSERT_TRUE(own.Add(2, 0));   // Only on the own shard so far.
  ASSERT_TRUE(copy.Add(3, 0));  // Only on the copy.
  AppliedLeases a, b;
  own.Report(1, 100, &a);
  copy.Report(1, 100, &b);
  const AppliedLeases both = AppliedOnBoth(a, b);
  EXPECT_THAT(Ids(both), ElementsAre(1));
  EXPECT_THAT(Counts(both), ElementsAre(2));
  b.set_data_epoch(1);
  EXPECT_EQ(AppliedOnBoth(a, b).lease_ids_size(), 0);
}

// The scheduler's watermark drops the settled leases, and a later push of one is a repeat: an
// endless data epoch keeps only the leases in flight.
TEST(AppliedBatchesTest, SettledLeasesAreForgottenAndTheirPushesAreRepeats) {
  AppliedBatches applied;
  for (int64_t id = 1; id <= 5; ++id) ASSERT_TRUE(applied.Add(id, 0));
  ASSERT_TRUE(applied.Add(5, 1));
  applied.SettleBelow(4);
  EXPECT_EQ(applied.num_leases(), 2u);
  EXPECT_EQ(applied.settled_below(), 4);
  EXPECT_FALSE(applied.Add(2, 1));  // settled: a repeat, not kept
  EXPECT_EQ(applied.num_leases(), 2u);
  EXPECT_FALSE(applied.Add(5, 1));
  EXPECT_TRUE(applied.Add(5, 2));
  applied.SettleBelow(3);  // lower: no change
  EXPECT_EQ(applied.settled_below(), 4);
  AppliedLeases report;
  applied.Report(1, 100, &report);
  EXPECT_THAT(Ids(report), ElementsAre(4, 5));
  EXPECT_THAT(Counts(report), ElementsAre(1, 3));
  // A rollback forgets the leases, not the watermark.
  applied.Clear();
  EXPECT_FALSE(applied.Add(3, 0));
  EXPECT_TRUE(applied.Add(4, 0));
}

}  // namespace
}  // namespace pstrain::server
