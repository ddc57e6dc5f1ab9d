// SYNC partial pushes: a worker's gradient for a step arriving in parts (one per layer, last layer
// first), as the overlapping worker sends it.
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server::store_test {
namespace {

using ::testing::HasSubstr;

// The part of MakePush(rank, step, samples, grad) holding chunk `chunk` only (0: fc1.weight,
// 1: fc1.bias), with its own request id.
PushRequest MakePart(int rank, int64_t step, int64_t samples, const std::vector<float>& grad, int chunk,
                     uint64_t request_id) {
  PushRequest whole = MakePush(rank, step, samples, grad);
  PushRequest part = whole;
  part.clear_chunks();
  *part.add_chunks() = whole.chunks(chunk);
  part.set_partial(true);
  part.set_first_chunk(chunk);
  part.set_request_id(request_id);
  return part;
}

TEST(ParameterStorePartsTest, PartsInAnyOrderGiveTheSameStepAsWholePushes) {
  auto whole = MakeStore(MakeOptions(SYNC, 2));
  auto parted = MakeStore(MakeOptions(SYNC, 2));
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(PushNow(*whole, MakePush(0, step, 3, WorkerGradient(0, step))).ok());
    ASSERT_TRUE(PushNow(*whole, MakePush(1, step, 5, WorkerGradient(1, step))).ok());
    // Worker 1 sends the bias first, worker 0 the weight first; worker 0 sends a whole push.
    ASSERT_TRUE(PushNow(*parted, MakePart(1, step, 5, WorkerGradient(1, step), 1, 10 + 2 * step)).ok());
    EXPECT_EQ(parted->step(), step);
    ASSERT_TRUE(PushNow(*parted, MakePush(0, step, 3, WorkerGradient(0, step))).ok());
    EXPECT_EQ(parted->step(), step) << "worker 1's weight part is still missing";
    ASSERT_TRUE(PushNow(*parted, MakePart(1, step, 5, WorkerGradient(1, step), 0, 11 + 2 * step)).ok());
    EXPECT_EQ(parted->step(), step + 1);
  }
  EXPECT_EQ(Flat(parted->Snapshot()), Flat(whole->Snapshot()));
}

TEST(ParameterStorePartsTest, PushPullOfAPartAnswersWithItsChunksFirstChunkFirst) {
  auto store = MakeStore(MakeOptions(SYNC, 1));
  std::vector<int> order;
  PullResponse bias_resp, weight_resp;
  store->PushPull(MakePart(0, 0, 2, Filled(1.0f, 0.0f), 1, 7), &bias_resp, [&](absl::Status s) {
    ASSERT_TRUE(s.ok()) << s;
    order.push_back(1);
  });
  EXPECT_TRUE(order.empty()) << "answered before the step was complete";
  store->PushPull(MakePart(0, 0, 2, Filled(1.0f, 0.0f), 0, 8), &weight_resp, [&](absl::Status s) {
    ASSERT_TRUE(s.ok()) << s;
    order.push_back(0);
  });
  ASSERT_EQ(order, (std::vector<int>{0, 1})) << "the first layer's part comes back first";
  ASSERT_EQ(weight_resp.chunks_size(), 1);
  EXPECT_EQ(weight_resp.chunks(0).tensor_id(), 0);
  ASSERT_EQ(bias_resp.chunks_size(), 1);
  EXPECT_EQ(bias_resp.chunks(0).tensor_id(), 1);
  EXPECT_EQ(bias_resp.step(), 1);
  const std::vector<float> all = Flat(store->Snapshot());
  EXPECT_EQ(Floats(bias_resp.chunks(0).data()), std::vector<float>(all.begin() + 20, all.end()));
}

TEST(ParameterStorePartsTest, RetriedPartIsOkAndOverlappingPartIsRefused) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> before = Flat(store->Snapshot());
  ASSERT_TRUE(PushNow(*store, MakePart(0, 0, 2, Filled(1.0f, 0.0f), 1, 7)).ok());
  EXPECT_TRUE(PushNow(*store, MakePart(0, 0, 2, Filled(1.0f, 0.0f), 1, 7)).ok()) << "a retry";
  absl::Status again = PushNow(*store, MakePart(0, 0, 2, Filled(9.0f, 0.0f), 1, 99));
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_THAT(again.message(), HasSubstr("chunk 1 (tensor 'fc1.bias' at offset 0) is already stored"));
  absl::Status whole = PushNow(*store, MakePush(0, 0, 2, Filled(9.0f, 0.0f)));
  EXPECT_TRUE(absl::IsAlreadyExists(whole)) << whole;
  absl::Status samples = PushNow(*store, MakePart(0, 0, 3, Filled(1.0f, 0.0f), 0, 8));
  EXPECT_TRUE(absl::IsInvalidArgument(samples)) << samples;
  EXPECT_THAT(samples.message(), HasSubstr("num_samples is 3, but an earlier part of the step said 2"));
  // Nothing above was stored: the step completes with the first part's values.
  ASSERT_TRUE(PushNow(*store, MakePart(0, 0, 2, Filled(1.0f, 0.0f), 0, 8)).ok());
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 2, Filled(1.0f, 0.0f))).ok());
  const std::vector<float> after = Flat(store->Snapshot());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(after[i], before[i] - kLr * 1.0f) << i;
}

TEST(ParameterStorePartsTest, MalformedPartsAreRefusedWithTheirPlace) {
  auto store = MakeStore(MakeOptions(SYNC, 1));
  PushRequest beyond = MakePart(0, 0, 1, Filled(1.0f, 0.0f), 1, 7);
  beyond.set_first_chunk(2);
  absl::Status s = PushNow(*store, beyond);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("partial push of 1 chunks from chunk 2, expected 1 or more of the 2 chunks"));
  PushRequest shifted = MakePart(0, 0, 1, Filled(1.0f, 0.0f), 1, 7);
  shifted.set_first_chunk(0);  // fc1.bias where fc1.weight belongs
  s = PushNow(*store, shifted);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("chunk 0 is tensor 'fc1.bias' at offset 0, expected tensor 'fc1.weight'"));
  PushRequest empty = MakePart(0, 0, 1, Filled(1.0f, 0.0f), 1, 7);
  empty.clear_chunks();
  EXPECT_TRUE(absl::IsInvalidArgument(PushNow(*store, empty)));

  auto async = MakeStore(MakeOptions(ASYNC, 1));
  s = PushNow(*async, MakePart(0, 0, 1, Filled(1.0f, 0.0f), 1, 7));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("for SYNC mode only"));
  EXPECT_EQ(store->step(), 0);
}

TEST(ParameterStorePartsTest, MembershipChangeDropsStoredPartsAndAbortsParkedOnes) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  PullResponse resp;
  Outcome parked;
  store->PushPull(MakePart(0, 0, 2, Filled(1.0f, 0.0f), 1, 7), &resp, parked.done());
  ASSERT_TRUE(store->UpdateMembership(5, {0, 1}).ok());
  ASSERT_TRUE(parked.status.has_value());
  EXPECT_TRUE(absl::IsAborted(*parked.status)) << *parked.status;
  // The same part under the new epoch is stored afresh, not taken for a retry or an overlap.
  PushRequest again = MakePart(0, 0, 2, Filled(1.0f, 0.0f), 1, 17);
  again.set_membership_epoch(5);
  EXPECT_TRUE(PushNow(*store, again).ok());
}

}  // namespace
}  // namespace pstrain::server::store_test
