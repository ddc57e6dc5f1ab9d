#include "scheduler/lease_pool.h"

#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

LeasePool::Options Opts(int64_t n, int batch, int lease_batches, int epochs, int64_t max_batches = 0) {
  LeasePool::Options o;
  o.train_samples = n;
  o.batch_size = batch;
  o.lease_batches = lease_batches;
  o.epochs = epochs;
  o.max_batches = max_batches;
  return o;
}

TEST(LeasePoolTest, CoversEveryPositionExactlyOncePerEpoch) {
  LeasePool pool(Opts(1000, 32, 4, 2));  // leases of 128 positions, the last 1000 - 7*128 = 104.
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> seen(1000, 0);
    int leases = 0;
    for (int i = 0;; ++i) {
      absl::StatusOr<Lease> lease = pool.Next(i % 3, epoch);
      ASSERT_TRUE(lease.ok()) << lease.status();
      if (lease->epoch_done) break;
      ++leases;
      EXPECT_EQ(lease->worker_rank, i % 3);
      EXPECT_EQ(lease->epoch, epoch);
      if (lease->end < 1000) {
        EXPECT_EQ(lease->end - lease->begin, 128);
      }
      for (int64_t p = lease->begin; p < lease->end; ++p) ++seen[p];
    }
    EXPECT_EQ(leases, 8);
    for (int p = 0; p < 1000; ++p) ASSERT_EQ(seen[p], 1) << "epoch " << epoch << " position " << p;
  }
  ASSERT_EQ(pool.leases().size(), 16u);
  EXPECT_EQ(pool.leases()[7].begin, 896);
  EXPECT_EQ(pool.leases()[7].end, 1000);
  EXPECT_EQ(pool.leases()[15].id, 16);
}

TEST(LeasePoolTest, EpochDoneForEveryoneOnceUsedUp) {
  LeasePool pool(Opts(10, 5, 1, 3));
  EXPECT_EQ(pool.Next(0, 0)->end, 5);
  EXPECT_EQ(pool.Next(1, 0)->end, 10);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  EXPECT_TRUE(pool.Next(1, 0)->epoch_done);
  // Worker 0 opens epoch 1; a late request of worker 1 for epoch 0 still hears epoch_done.
  absl::StatusOr<Lease> first = pool.Next(0, 1);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->epoch_done);
  EXPECT_EQ(first->begin, 0);
  EXPECT_TRUE(pool.Next(1, 0)->epoch_done);
  EXPECT_EQ(pool.current_epoch(), 1);
}

TEST(LeasePoolTest, AskingForTheNextEpochTooEarlyIsFailedPrecondition) {
  LeasePool pool(Opts(10, 5, 1, 3));
  ASSERT_TRUE(pool.Next(0, 0).ok());
  EXPECT_EQ(pool.Next(1, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Next(1, 2).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Next(1, 3).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(pool.Next(1, -1).status().code(), absl::StatusCode::kOutOfRange);
  // The refused requests changed nothing.
  EXPECT_EQ(pool.Next(1, 0)->begin, 5);
}

TEST(LeasePoolTest, MaxBatchesCapsTheWholeJob) {
  LeasePool pool(Opts(100, 10, 4, 5, /*max_batches=*/6));
  absl::StatusOr<Lease> a = pool.Next(0, 0);
  absl::StatusOr<Lease> b = pool.Next(1, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->end - a->begin, 40);
  EXPECT_EQ(b->begin, 40);
  EXPECT_EQ(b->end, 60);  // Only 2 of the 6 batches were left.
  EXPECT_EQ(pool.batches_leased(), 6);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  // Later epochs hand out nothing either.
  EXPECT_TRUE(pool.Next(0, 1)->epoch_done);
  EXPECT_TRUE(pool.Next(1, 1)->epoch_done);
  EXPECT_EQ(pool.leases().size(), 2u);
}

TEST(LeasePoolTest, ShortTailBatchCountsAsOne) {
  LeasePool pool(Opts(25, 10, 1, 2, /*max_batches=*/4));
  EXPECT_EQ(pool.Next(0, 0)->end, 10);
  EXPECT_EQ(pool.Next(0, 0)->end, 20);
  EXPECT_EQ(pool.Next(0, 0)->end, 25);
  EXPECT_EQ(pool.batches_leased(), 3);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  EXPECT_EQ(pool.Next(0, 1)->end, 10);
  EXPECT_TRUE(pool.Next(0, 1)->epoch_done);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
