// AsyncStep (server/async_step.h): which ASYNC/SSP pushes apply, epoch by epoch, and what a server
// confirms of them.
#include "server/async_step.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Worker `rank`'s push of batch `batch` of lease `lease` (0: unleased) in data epoch `epoch`.
PushRequest Push(int rank, int32_t epoch, int64_t lease, int64_t batch = 0) {
  PushRequest req;
  req.set_worker_rank(rank);
  req.set_data_epoch(epoch);
  req.set_lease_id(lease);
  req.set_lease_batch(batch);
  return req;
}

// The verdict on `req`, which must be OK, as (new_epoch, ended_epoch, apply).
std::tuple<bool, bool, bool> Decide(AsyncStep& step, const PushRequest& req) {
  absl::StatusOr<AsyncStep::Verdict> v = step.Push(req);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::make_tuple(v->new_epoch, v->ended_epoch, v->apply) : std::make_tuple(false, false, false);
}

TEST(AsyncStepTest, EachLeasedBatchAppliesOnceAnEpoch) {
  AsyncStep step(0, /*ssp=*/false);
  EXPECT_EQ(Decide(step, Push(0, 0, 7, 0)), std::make_tuple(false, false, true));
  EXPECT_EQ(Decide(step, Push(1, 0, 7, 0)), std::make_tuple(false, false, false));  // the rest of a lease, again
  EXPECT_EQ(Decide(step, Push(1, 0, 7, 1)), std::make_tuple(false, false, true));
  // Unleased pushes always apply.
  EXPECT_EQ(Decide(step, Push(0, 0, 0)), std::make_tuple(false, false, true));
  EXPECT_EQ(Decide(step, Push(0, 0, 0)), std::make_tuple(false, false, true));
  const AppliedLeases applied = step.AppliedFrom(1, 10);
  EXPECT_EQ(applied.data_epoch(), 0);
  EXPECT_THAT(applied.lease_ids(), ElementsAre(7));
  EXPECT_THAT(applied.batches(), ElementsAre(2));
}

TEST(AsyncStepTest, ANewerEpochBeginsWithItsFirstPushAndAnEndedEpochsBatchesAreRepeats) {
  AsyncStep step(3, /*ssp=*/false);
  ASSERT_EQ(Decide(step, Push(0, 0, 7, 0)), std::make_tuple(false, false, true));
  EXPECT_EQ(Decide(step, Push(1, 1, 7, 0)), std::make_tuple(true, false, true));  // lease ids restart
  EXPECT_EQ(step.data_epoch(), 1);
  EXPECT_EQ(Decide(step, Push(0, 0, 8, 0)), std::make_tuple(false, true, false));
  EXPECT_THAT(step.AppliedFrom(1, 10).lease_ids(), ElementsAre(7));
  // ASYNC: an unleased push of an older epoch applies (it has no epoch to enter).
  EXPECT_EQ(Decide(step, Push(0, 0, 0)), std::make_tuple(false, false, true));
}

TEST(AsyncStepTest, SspEntersTheEpochOfEveryPushAndRefusesAnOlderUnleasedOne) {
  AsyncStep step(3, /*ssp=*/true);
  EXPECT_EQ(Decide(step, Push(0, 1, 0)), std::make_tuple(true, false, true));
  const absl::StatusOr<AsyncStep::Verdict> old = step.Push(Push(1, 0, 0));
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.status().message(),
              HasSubstr("push from worker 1 for data epoch 0: server 3 is already in data epoch 1"));
  EXPECT_EQ(step.data_epoch(), 1);
  // A leased batch of the older epoch is a repeat, not an error.
  EXPECT_EQ(Decide(step, Push(1, 0, 4, 2)), std::make_tuple(false, true, false));
}

TEST(AsyncStepTest, EnteringAnEpochForgetsItsBatchesAndARollbackToo) {
  AsyncStep step(0, /*ssp=*/true);
  EXPECT_EQ(step.EnterEpoch("pull", 0, 0).value(), false);
  ASSERT_EQ(Decide(step, Push(0, 0, 5, 0)), std::make_tuple(false, false, true));
  step.ForgetBatches();  // a rollback: the batch applies again
  EXPECT_EQ(Decide(step, Push(0, 0, 5, 0)), std::make_tuple(false, false, true));
  EXPECT_EQ(step.EnterEpoch("finish epoch", 1, 2).value(), true);
  EXPECT_EQ(step.AppliedFrom(1, 10).lease_ids_size(), 0);
  EXPECT_EQ(step.EnterEpoch("pull", 1, 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pstrain::server
