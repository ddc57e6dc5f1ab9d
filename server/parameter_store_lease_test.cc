// ParameterStore in ASYNC/SSP: each leased batch (data_epoch, lease_id, lease_batch) is applied at
// most once, so a remainder re-pushed after its holder died is applied exactly once everywhere.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server::store_test {
namespace {

using ::testing::HasSubstr;

// A push of batch `batch` of lease `lease` in `data_epoch`, with a constant gradient.
PushRequest LeasedPush(int rank, int64_t step, float grad, int64_t lease, int64_t batch, uint64_t request_id,
                       int32_t data_epoch = 0) {
  PushRequest req = MakePush(rank, step, 1, std::vector<float>(25, grad), request_id);
  req.set_data_epoch(data_epoch);
  req.set_lease_id(lease);
  req.set_lease_batch(batch);
  return req;
}

// w0 - kLr * sum(grads), element-wise (exact: constant gradients and a power-of-two rate).
std::vector<float> After(const std::vector<float>& w0, const std::vector<float>& grads) {
  std::vector<float> w = w0;
  for (float g : grads) {
    for (float& x : w) x -= kLr * g;
  }
  return w;
}

class LeasedBatchTest : public ::testing::TestWithParam<Mode> {};

TEST_P(LeasedBatchTest, RepeatedBatchIsSkippedWhereAppliedAndAppliedWhereNot) {
  // Two servers holding the same model: worker 0 pushed batch 0 of lease 3 to server A only, then
  // died; worker 1 got the remainder (from batch 0) and pushes batch 0 and 1 to both.
  auto a = MakeStore(MakeOptions(GetParam(), 2));
  auto b = MakeStore(MakeOptions(GetParam(), 2));
  const std::vector<float> w0 = Flat(a->Snapshot());
  ASSERT_TRUE(PushNow(*a, LeasedPush(0, 0, 1.0f, 3, 0, 11)).ok());
  ASSERT_TRUE(a->UpdateMembership(5, {1}).ok());
  ASSERT_TRUE(b->UpdateMembership(5, {1}).ok());

  PushResponse resp;
  PushRequest repeat = LeasedPush(1, 0, 2.0f, 3, 0, 21);
  repeat.set_membership_epoch(5);
  ASSERT_TRUE(PushNow(*a, repeat, &resp).ok());
  EXPECT_EQ(resp.step(), 1);
  EXPECT_EQ(Flat(a->Snapshot()), After(w0, {1.0f}));  // unchanged by the repeat
  ASSERT_TRUE(PushNow(*b, repeat, &resp).ok());
  EXPECT_EQ(resp.step(), 1);
  EXPECT_EQ(Flat(b->Snapshot()), After(w0, {2.0f}));  // applied once

  // Pushing it to B again (another id, so not a retry) is a repeat there too.
  PushRequest again = repeat;
  again.set_request_id(22);
  ASSERT_TRUE(PushNow(*b, again).ok());
  EXPECT_EQ(b->step(), 1);
  EXPECT_EQ(Flat(b->Snapshot()), After(w0, {2.0f}));

  // The next batch is new on both.
  PushRequest next = LeasedPush(1, 1, 4.0f, 3, 1, 23);
  next.set_membership_epoch(5);
  ASSERT_TRUE(PushNow(*a, next).ok());
  ASSERT_TRUE(PushNow(*b, next).ok());
  EXPECT_EQ(a->step(), 2);
  EXPECT_EQ(b->step(), 2);
  EXPECT_EQ(Flat(a->Snapshot()), After(w0, {1.0f, 4.0f}));
  EXPECT_EQ(Flat(b->Snapshot()), After(w0, {2.0f, 4.0f}));
}

TEST_P(LeasedBatchTest, MemoryIsClearedWhenTheNextDataEpochBegins) {
  auto store = MakeStore(MakeOptions(GetParam(), 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  ASSERT_TRUE(PushNow(*store, LeasedPush(0, 0, 1.0f, 7, 2, 11, /*data_epoch=*/0)).ok());
  ASSERT_TRUE(PushNow(*store, LeasedPush(1, 0, 2.0f, 7, 2, 21, /*data_epoch=*/0)).ok());  // repeat
  EXPECT_EQ(store->step(), 1);

  // Lease ids start again in every data epoch: the same (lease, batch) in epoch 1 is new.
  ASSERT_TRUE(PushNow(*store, LeasedPush(1, 0, 4.0f, 7, 2, 22, /*data_epoch=*/1)).ok());
  EXPECT_EQ(store->step(), 2);
  ASSERT_TRUE(PushNow(*store, LeasedPush(0, 0, 8.0f, 7, 2, 12, /*data_epoch=*/1)).ok());  // repeat
  EXPECT_EQ(store->step(), 2);
  // A leased batch of an ended epoch was applied everywhere before the next epoch began: skipped.
  ASSERT_TRUE(PushNow(*store, LeasedPush(0, 1, 16.0f, 9, 0, 13, /*data_epoch=*/0)).ok());
  EXPECT_EQ(store->step(), 2);
  EXPECT_EQ(Flat(store->Snapshot()), After(w0, {1.0f, 4.0f}));
}

TEST_P(LeasedBatchTest, LeaseIdZeroIsNeverDeduplicated) {
  auto store = MakeStore(MakeOptions(GetParam(), 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  ASSERT_TRUE(PushNow(*store, LeasedPush(0, 0, 1.0f, 0, 0, 11)).ok());
  ASSERT_TRUE(PushNow(*store, LeasedPush(1, 0, 2.0f, 0, 0, 21)).ok());
  EXPECT_EQ(store->step(), 2);
  EXPECT_EQ(Flat(store->Snapshot()), After(w0, {1.0f, 2.0f}));
}

TEST_P(LeasedBatchTest, NegativeLeaseIdOrBatchIsInvalid) {
  auto store = MakeStore(MakeOptions(GetParam(), 2));
  const absl::Status bad_id = PushNow(*store, LeasedPush(0, 0, 1.0f, -1, 0, 11));
  EXPECT_EQ(bad_id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_id.message()), HasSubstr("push from worker 0: batch 0 of lease -1, expected both >= 0"));
  EXPECT_EQ(PushNow(*store, LeasedPush(0, 0, 1.0f, 3, -2, 12)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->step(), 0);
}

INSTANTIATE_TEST_SUITE_P(AsyncAndSsp, LeasedBatchTest, ::testing::Values(ASYNC, SSP),
                         [](const ::testing::TestParamInfo<Mode>& info) { return Mode_Name(info.param); });

TEST(LeasedBatchSspTest, RepeatAdvancesTheClockAndPushPullWaitsForStaleness) {
  ParameterStore::Options options = MakeOptions(SSP, 2);
  options.job.set_staleness(1);
  auto store = MakeStore(options);
  const std::vector<float> w0 = Flat(store->Snapshot());
  // Worker 0 at clock 2 asks for step 2: it needs worker 1 at clock >= 1.
  ASSERT_TRUE(PushNow(*store, LeasedPush(0, 0, 1.0f, 4, 0, 11)).ok());
  PullResponse first_resp, second_resp;
  Outcome first, second;
  store->PushPull(LeasedPush(0, 1, 2.0f, 4, 1, 12), &first_resp, first.done());
  EXPECT_FALSE(first.status.has_value());
  // Worker 1 pushes batch 0 again (it took over the lease): not applied, but its clock advances,
  // which releases worker 0; its own answer holds the current weights.
  store->PushPull(LeasedPush(1, 0, 8.0f, 4, 0, 21), &second_resp, second.done());
  ASSERT_TRUE(first.status.has_value());
  EXPECT_TRUE(first.status->ok()) << *first.status;
  ASSERT_TRUE(second.status.has_value());
  EXPECT_TRUE(second.status->ok()) << *second.status;
  EXPECT_EQ(second_resp.step(), 2);
  EXPECT_EQ(Flat(second_resp.chunks()), After(w0, {1.0f, 2.0f}));
  EXPECT_EQ(Flat(first_resp.chunks()), After(w0, {1.0f, 2.0f}));

  // A repeat is still subject to the staleness wait: worker 1, at clock 4 after two batches of
  // its own lease and a repeat, needs worker 0 (clock 2) at >= 3.
  ASSERT_TRUE(PushNow(*store, LeasedPush(1, 1, 4.0f, 5, 0, 22)).ok());
  ASSERT_TRUE(PushNow(*store, LeasedPush(1, 2, 4.0f, 5, 1, 23)).ok());
  Outcome third;
  store->PushPull(LeasedPush(1, 3, 8.0f, 4, 1, 24), &second_resp, third.done());
  EXPECT_FALSE(third.status.has_value());
  EXPECT_EQ(store->step(), 4);
  ASSERT_TRUE(PushNow(*store, LeasedPush(0, 2, 2.0f, 4, 2, 13)).ok());
  ASSERT_TRUE(third.status.has_value());
  EXPECT_TRUE(third.status->ok()) << *third.status;
  EXPECT_EQ(second_resp.step(), 5);
  EXPECT_EQ(Flat(second_resp.chunks()), After(w0, {1.0f, 2.0f, 4.0f, 4.0f, 2.0f}));
}

TEST(LeasedBatchSspTest, FinishedWorkerPushingARemainderIsAppliedAndCountsUntilItFinishesAgain) {
  ParameterStore::Options options = MakeOptions(SSP, 2);
  options.job.set_staleness(1);
  auto store = MakeStore(options);
  const std::vector<float> w0 = Flat(store->Snapshot());
  FinishEpochRequest finish;
  finish.set_worker_rank(1);
  finish.set_data_epoch(0);
  ASSERT_TRUE(store->FinishEpoch(finish).ok());

  // Worker 1 gets the remainder of a dead worker's lease: its pushes are applied.
  ASSERT_TRUE(PushNow(*store, LeasedPush(1, 0, 1.0f, 6, 3, 21)).ok());
  EXPECT_EQ(store->step(), 1);
  EXPECT_EQ(Flat(store->Snapshot()), After(w0, {1.0f}));

  // ...and it is back in (a stream's idle worker gets new records the same way), at clock 1: worker
  // 0 at clock 3 needs every unfinished clock >= 2, so its pull waits for worker 1...
  for (int64_t t = 0; t < 3; ++t) ASSERT_TRUE(PushNow(*store, LeasedPush(0, t, 2.0f, 2, t, 11 + t)).ok());
  PullResponse resp;
  Outcome pull;
  store->Pull(MakePull(0, 3), &resp, pull.done());
  EXPECT_FALSE(pull.status.has_value()) << "worker 1 pushed again: it counts again";
  // ...until worker 1, idle again, says so.
  ASSERT_TRUE(store->FinishEpoch(finish).ok());
  ASSERT_TRUE(pull.status.has_value()) << "worker 1 finished again but holds worker 0 back";
  EXPECT_TRUE(pull.status->ok()) << *pull.status;
  EXPECT_EQ(resp.step(), 4);
  EXPECT_EQ(Flat(resp.chunks()), After(w0, {1.0f, 2.0f, 2.0f, 2.0f}));
}

}  // namespace
}  // namespace pstrain::server::store_test
