#include "data/assignment.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace data {
namespace {

struct SyncCase {
  int64_t n;
  int batch_size;
  int num_workers;
};

TEST(SyncAssignmentTest, EpochCoversEveryPositionExactlyOnce) {
  const std::vector<SyncCase> cases = {{10, 3, 2}, {1000, 64, 3}, {5, 4, 3},      {1, 8, 4},     {12, 3, 2},
                                       {7, 1, 1},  {0, 3, 2},     {60000, 32, 5}, {100, 10, 10}, {101, 10, 10}};
  for (const SyncCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "n=" << c.n << " B=" << c.batch_size << " W=" << c.num_workers);
    const int64_t steps = SyncStepsPerEpoch(c.n, int64_t{c.batch_size} * c.num_workers);
    const int64_t global = int64_t{c.batch_size} * c.num_workers;
    EXPECT_EQ(steps, (c.n + global - 1) / global);
    std::vector<int> covered(c.n, 0);
    int64_t expected_next = 0;  // Slices are laid out in (step, rank) order without gaps.
    for (int64_t t = 0; t < steps; ++t) {
      for (int r = 0; r < c.num_workers; ++r) {
        const Range s = SyncSliceOfGlobalBatch(c.n, int64_t{c.batch_size} * c.num_workers, c.num_workers, r, t);
        ASSERT_LE(s.begin, s.end);
        ASSERT_GE(s.begin, 0);
        ASSERT_LE(s.end, c.n);
        EXPECT_LE(s.size(), c.batch_size);
        if (s.empty()) {
          EXPECT_EQ(t, steps - 1) << "empty slice for rank " << r << " before the last step";
        } else {
          EXPECT_EQ(s.begin, expected_next) << "rank " << r << " step " << t;
          expected_next = s.end;
        }
        if (t < steps - 1) {
          EXPECT_EQ(s.size(), c.batch_size);
        }
        for (int64_t p = s.begin; p < s.end; ++p) ++covered[p];
      }
    }
    for (int64_t p = 0; p < c.n; ++p) ASSERT_EQ(covered[p], 1) << "position " << p;
  }
}

TEST(SyncAssignmentTest, ShortLastBatchFillsLowRanksFirst) {
  // n = 10, B = 3, W = 2: step 1 covers [6, 10): rank 0 [6, 9), rank 1 [9, 10).
  EXPECT_EQ(SyncStepsPerEpoch(10, int64_t{3} * 2), 2);
  EXPECT_EQ(SyncSliceOfGlobalBatch(10, int64_t{3} * 2, 2, 0, 0), (Range{0, 3}));
  EXPECT_EQ(SyncSliceOfGlobalBatch(10, int64_t{3} * 2, 2, 1, 0), (Range{3, 6}));
  EXPECT_EQ(SyncSliceOfGlobalBatch(10, int64_t{3} * 2, 2, 0, 1), (Range{6, 9}));
  EXPECT_EQ(SyncSliceOfGlobalBatch(10, int64_t{3} * 2, 2, 1, 1), (Range{9, 10}));
  // n < B * W: one step; rank 2 gets nothing.
  EXPECT_EQ(SyncStepsPerEpoch(5, int64_t{4} * 3), 1);
  EXPECT_EQ(SyncSliceOfGlobalBatch(5, int64_t{4} * 3, 3, 0, 0), (Range{0, 4}));
  EXPECT_EQ(SyncSliceOfGlobalBatch(5, int64_t{4} * 3, 3, 1, 0), (Range{4, 5}));
  EXPECT_TRUE(SyncSliceOfGlobalBatch(5, int64_t{4} * 3, 3, 2, 0).empty());
  EXPECT_EQ(SyncSliceOfGlobalBatch(5, int64_t{4} * 3, 3, 2, 0).size(), 0);
}

TEST(SyncAssignmentTest, StepPastTheEpochIsEmpty) {
  EXPECT_EQ(SyncSliceOfGlobalBatch(10, int64_t{3} * 2, 2, 0, 2), (Range{10, 10}));
  EXPECT_EQ(SyncSliceOfGlobalBatch(0, int64_t{3} * 2, 2, 1, 0), (Range{0, 0}));
}

TEST(EvenSliceTest, CoversExactlyOnceWithSizesWithinOne) {
  for (int64_t n : {0, 1, 7, 10, 10000, 10001}) {
    for (int parts : {1, 2, 3, 7, 16}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " parts=" << parts);
      int64_t next = 0;
      int64_t min_size = n, max_size = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = EvenSlice(n, parts, i);
        EXPECT_EQ(r.begin, next);
        EXPECT_GE(r.size(), 0);
        min_size = std::min(min_size, r.size());
        max_size = std::max(max_size, r.size());
        next = r.end;
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(max_size - min_size, 1);
    }
  }
  EXPECT_EQ(EvenSlice(10, 3, 0), (Range{0, 4}));
  EXPECT_EQ(EvenSlice(10, 3, 1), (Range{4, 7}));
  EXPECT_EQ(EvenSlice(10, 3, 2), (Range{7, 10}));
}

TEST(LeaseBatchingTest, CoversLeaseExactlyOnce) {
  for (const Range lease : {Range{0, 0}, Range{5, 6}, Range{100, 164}, Range{100, 165}, Range{37, 1000}}) {
    for (int b : {1, 3, 64, 1000}) {
      SCOPED_TRACE(testing::Message() << "lease [" << lease.begin << ", " << lease.end << ") B=" << b);
      const int64_t batches = NumBatches(lease, b);
      EXPECT_EQ(batches, (lease.size() + b - 1) / b);
      int64_t next = lease.begin;
      for (int64_t i = 0; i < batches; ++i) {
        const Range batch = BatchOf(lease, b, i);
        EXPECT_EQ(batch.begin, next);
        EXPECT_GT(batch.size(), 0);
        if (i < batches - 1) {
          EXPECT_EQ(batch.size(), b);
        }
        EXPECT_LE(batch.size(), b);
        next = batch.end;
      }
      EXPECT_EQ(next, lease.end);
    }
  }
  EXPECT_EQ(BatchOf(Range{100, 165}, 64, 1), (Range{164, 165}));
}

TEST(AssignmentDeathTest, RejectsBadArguments) {
  EXPECT_DEATH(SyncSliceOfGlobalBatch(10, int64_t{3} * 2, 2, 2, 0), "slot 2 of 2");
  EXPECT_DEATH(BatchOf(Range{0, 10}, 3, 4), "batch 4");
}

}  // namespace
TEST(SyncSliceOfGlobalBatchTest, EveryWorkerLiveGivesEachRankItsOwnBatch) {
  // 3 workers of 64: rank r takes [t*192 + r*64, t*192 + (r+1)*64), clipped to n = 1000.
  for (int64_t step = 0; step < 6; ++step) {
    for (int r = 0; r < 3; ++r) {
      const int64_t begin = std::min<int64_t>(step * 192 + r * 64, 1000);
      const int64_t end = std::min<int64_t>(begin + 64, std::min<int64_t>((step + 1) * 192, 1000));
      EXPECT_EQ(SyncSliceOfGlobalBatch(1000, 192, 3, r, step), (Range{begin, end})) << step << " " << r;
    }
  }
}

TEST(SyncGlobalBatchSizeTest, FullBatchesThenTheTailThenNothing) {
  EXPECT_EQ(SyncGlobalBatchSize(1000, 192, 0), 192);
  EXPECT_EQ(SyncGlobalBatchSize(1000, 192, 4), 192);
  EXPECT_EQ(SyncGlobalBatchSize(1000, 192, 5), 40);  // 1000 - 5 * 192.
  EXPECT_EQ(SyncGlobalBatchSize(1000, 192, 6), 0);
  int64_t total = 0;
  for (int64_t t = 0; t < SyncStepsPerEpoch(1000, 192); ++t) total += SyncGlobalBatchSize(1000, 192, t);
  EXPECT_EQ(total, 1000);
}

TEST(SyncSliceOfGlobalBatchTest, SurvivorsCoverEachGlobalBatchExactlyOnce) {
  // A job of 4 x 16 per step; 4, 3, 2 and 1 workers live: every batch is covered exactly once.
  const int64_t n = 1000, global = 64;
  for (int live = 1; live <= 4; ++live) {
    std::vector<int> seen(n, 0);
    for (int64_t step = 0; step * global < n; ++step) {
      int64_t covered = 0;
      for (int slot = 0; slot < live; ++slot) {
        Range r = SyncSliceOfGlobalBatch(n, global, live, slot, step);
        for (int64_t i = r.begin; i < r.end; ++i) ++seen[i];
        covered += r.size();
      }
      EXPECT_EQ(covered, std::min(global, n - step * global)) << live << " live, step " << step;
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "position " << i << ", " << live << " live";
  }
}

}  // namespace data
}  // namespace pstrain
