// ParameterStore::UpdateMembership and the fencing of requests by membership epoch.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server::store_test {
namespace {

using ::testing::HasSubstr;

PushRequest AtEpoch(PushRequest req, int64_t epoch) {
  req.set_membership_epoch(epoch);
  return req;
}
PullRequest AtEpoch(PullRequest req, int64_t epoch) {
  req.set_membership_epoch(epoch);
  return req;
}

TEST(ParameterStoreMembershipTest, NewEpochAbortsHalfPushedStepAndSurvivorsCompleteIt) {
  auto store = MakeStore(MakeOptions(SYNC, 3));
  const std::vector<float> w0 = Flat(store->Snapshot());
  // Workers 0 and 1 push step 0 under epoch 4 (worker 2 never will: it died).
  PullResponse pushpull_resp, pull_resp;
  Outcome pushpull, pull;
  store->PushPull(MakePush(0, 0, 5, std::vector<float>(25, 100.0f)), &pushpull_resp, pushpull.done());
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 5, std::vector<float>(25, -50.0f))).ok());
  store->Pull(MakePull(1, 1), &pull_resp, pull.done());
  EXPECT_FALSE(pushpull.status.has_value());
  EXPECT_FALSE(pull.status.has_value());

  ASSERT_TRUE(store->UpdateMembership(5, {1, 0}).ok());
  EXPECT_EQ(store->membership_epoch(), 5);
  for (Outcome* o : {&pushpull, &pull}) {
    ASSERT_TRUE(o->status.has_value());
    EXPECT_EQ(o->status->code(), absl::StatusCode::kAborted);
    EXPECT_EQ(o->status->message(), "server 0 moved to membership epoch 5 while step 0 was unfinished; recompute it");
  }
  EXPECT_EQ(store->step(), 0);
  EXPECT_EQ(Flat(store->Snapshot()), w0);

  // The old epoch's pushes are refused; the survivors recompute step 0 (new ids) and complete it
  // with their new gradients only: 1/4 * 4 + 3/4 * (8 + i) = 7 + 0.75 i.
  absl::Status old = PushNow(*store, MakePush(0, 0, 1, std::vector<float>(25, 4.0f), 501));
  EXPECT_EQ(old.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(old.message()), HasSubstr("carries membership epoch 4, current is 5"));
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(1, 0, 3, Filled(8.0f, 1.0f), 502), 5)).ok());
  EXPECT_EQ(store->step(), 0);
  PullResponse done_resp;
  Outcome done;
  store->PushPull(AtEpoch(MakePush(0, 0, 1, std::vector<float>(25, 4.0f), 503), 5), &done_resp, done.done());
  ASSERT_TRUE(done.status.has_value());
  ASSERT_TRUE(done.status->ok()) << *done.status;
  EXPECT_EQ(done_resp.step(), 1);
  const std::vector<float> w1 = Flat(done_resp.chunks());
  ASSERT_EQ(w1.size(), 25u);
  for (int i = 0; i < 25; ++i) EXPECT_EQ(w1[i], w0[i] - kLr * (7.0f + 0.75f * i)) << i;
}

TEST(ParameterStoreMembershipTest, PushFromRemovedWorkerIsAbortedAndChangesNothing) {
  auto store = MakeStore(MakeOptions(SYNC, 3));
  const std::vector<float> w0 = Flat(store->Snapshot());
  ASSERT_TRUE(store->UpdateMembership(5, {0, 2}).ok());
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(0, 0, 1, std::vector<float>(25, 2.0f)), 5)).ok());

  absl::Status removed = PushNow(*store, AtEpoch(MakePush(1, 0, 1, std::vector<float>(25, 1000.0f)), 5));
  EXPECT_EQ(removed.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(removed.message()), HasSubstr("worker 1 is not a live member at membership epoch 5"));
  PullResponse resp;
  Outcome pull;
  store->Pull(AtEpoch(MakePull(1, 0), 5), &resp, pull.done());
  ASSERT_TRUE(pull.status.has_value());
  EXPECT_EQ(pull.status->code(), absl::StatusCode::kAborted);
  FinishEpochRequest finish;
  finish.set_worker_rank(1);
  EXPECT_EQ(store->FinishEpoch(finish).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store->step(), 0);
  EXPECT_EQ(Flat(store->Snapshot()), w0);

  // Worker 2 completes the step; worker 1's gradient is in no sum.
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(2, 0, 1, std::vector<float>(25, 4.0f)), 5)).ok());
  EXPECT_EQ(store->step(), 1);
  const std::vector<float> w1 = Flat(store->Snapshot());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(w1[i], w0[i] - kLr * 3.0f) << i;
}

TEST(ParameterStoreMembershipTest, NewerEpochIsAbortedUntilTheServerLearnsIt) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  // Worker 3 joined at epoch 5; the server is still at 4, so it is told to retry, not that it is
  // not a member.
  absl::Status early = PushNow(*store, AtEpoch(MakePush(3, 0, 1, std::vector<float>(25, 2.0f)), 5));
  EXPECT_EQ(early.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(early.message(), "server 0 is at membership epoch 4, the push carries 5; retry shortly");
  PullResponse resp;
  Outcome pull;
  store->Pull(AtEpoch(MakePull(0, 0), 5), &resp, pull.done());
  ASSERT_TRUE(pull.status.has_value());
  EXPECT_EQ(pull.status->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(pull.status->message(), "server 0 is at membership epoch 4, the pull carries 5; retry shortly");

  // An update to an epoch we already have changes nothing.
  ASSERT_TRUE(store->UpdateMembership(4, {3}).ok());
  ASSERT_TRUE(store->UpdateMembership(2, {3}).ok());
  EXPECT_EQ(PushNow(*store, MakePush(3, 0, 1, std::vector<float>(25, 2.0f))).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store->membership_epoch(), 4);

  ASSERT_TRUE(store->UpdateMembership(5, {0, 1, 3}).ok());
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(3, 0, 1, std::vector<float>(25, 2.0f)), 5)).ok());
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(0, 0, 1, std::vector<float>(25, 2.0f)), 5)).ok());
  EXPECT_EQ(store->step(), 0);  // worker 1 is still live at epoch 5
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(1, 0, 1, std::vector<float>(25, 2.0f)), 5)).ok());
  EXPECT_EQ(store->step(), 1);
  const std::vector<float> w1 = Flat(store->Snapshot());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(w1[i], w0[i] - kLr * 2.0f) << i;
  EXPECT_EQ(store->Checkpoint()->membership_epoch, 5);

  EXPECT_EQ(store->UpdateMembership(6, {1, -1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->UpdateMembership(6, {1, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->membership_epoch(), 5);
}

TEST(ParameterStoreMembershipTest, PushForTheStepJustAppliedAnswersWithCurrentWeights) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, std::vector<float>(25, 2.0f))).ok());
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 1, std::vector<float>(25, 4.0f))).ok());
  ASSERT_EQ(store->step(), 1);
  const std::vector<float> w1 = Flat(store->Snapshot());

  // Another server dropped step 0 at epoch 5, so the workers recompute it and push it here too.
  ASSERT_TRUE(store->UpdateMembership(5, {0, 1}).ok());
  PullResponse resp;
  Outcome outcome;
  store->PushPull(AtEpoch(MakePush(0, 0, 2, std::vector<float>(25, 1000.0f), 901), 5), &resp, outcome.done());
  ASSERT_TRUE(outcome.status.has_value()) << "a push for the applied step must answer at once";
  ASSERT_TRUE(outcome.status->ok()) << *outcome.status;
  EXPECT_EQ(resp.step(), 1);
  EXPECT_EQ(Flat(resp.chunks()), w1);
  PushResponse push_resp;
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(1, 0, 2, std::vector<float>(25, 1000.0f), 902), 5), &push_resp).ok());
  EXPECT_EQ(push_resp.step(), 1);
  EXPECT_EQ(store->step(), 1);
  EXPECT_EQ(Flat(store->Snapshot()), w1);

  // Step 1 is unaffected: it still needs both workers, and an older step is stale.
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(0, 1, 1, std::vector<float>(25, 2.0f)), 5)).ok());
  EXPECT_EQ(store->step(), 1);
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(1, 1, 1, std::vector<float>(25, 2.0f)), 5)).ok());
  EXPECT_EQ(store->step(), 2);
  absl::Status stale = PushNow(*store, AtEpoch(MakePush(0, 0, 1, std::vector<float>(25, 2.0f), 903), 5));
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ParameterStoreMembershipTest, NonContiguousRanksSumInRankOrderLikeAFreshStore) {
  constexpr int kSteps = 20;
  ParameterStore::Options options = MakeOptions(SYNC, 3);
  options.job.mutable_optimizer()->set_type(OptimizerSpec::ADAM);
  options.job.mutable_optimizer()->set_lr(0.01f);
  const std::vector<int> ranks = {0, 2, 5};  // slot i of the view has rank ranks[i]

  auto reference = MakeStore(options);  // ranks 0, 1, 2
  ParameterStore::Options sparse_options = options;
  sparse_options.worker_ranks = {5, 0, 2};
  auto sparse = MakeStore(sparse_options);
  auto moved = MakeStore(options);
  ASSERT_TRUE(moved->UpdateMembership(5, {2, 5, 0}).ok());

  // The reference gets its pushes in slot order; the others in a different order every step.
  for (int64_t t = 0; t < kSteps; ++t) {
    for (int slot = 0; slot < 3; ++slot) {
      ASSERT_TRUE(PushNow(*reference, MakePush(slot, t, 1 + slot, WorkerGradient(slot, t))).ok());
    }
    for (int k = 0; k < 3; ++k) {
      const int slot = t % 2 == 0 ? static_cast<int>((k + t) % 3) : static_cast<int>(2 - (k + t) % 3);
      const std::vector<float> g = WorkerGradient(slot, t);
      ASSERT_TRUE(PushNow(*sparse, MakePush(ranks[slot], t, 1 + slot, g)).ok());
      ASSERT_TRUE(PushNow(*moved, AtEpoch(MakePush(ranks[slot], t, 1 + slot, g), 5)).ok());
    }
  }
  ASSERT_EQ(reference->step(), kSteps);
  ASSERT_EQ(sparse->step(), kSteps);
  ASSERT_EQ(moved->step(), kSteps);
  EXPECT_EQ(Flat(sparse->Snapshot()), Flat(reference->Snapshot()));
  EXPECT_EQ(Flat(moved->Snapshot()), Flat(reference->Snapshot()));
  EXPECT_NE(Flat(reference->Snapshot()), Flat(MakeStore(options)->Snapshot()));
}

TEST(ParameterStoreMembershipTest, SspRemovingTheSlowWorkerReleasesParkedPulls) {
  ParameterStore::Options options = MakeOptions(SSP, 2);
  options.job.set_staleness(1);
  auto store = MakeStore(options);
  const std::vector<float> g(25, 1.0f);
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, g)).ok());
  PullResponse resp;
  Outcome parked;
  store->PushPull(MakePush(0, 1, 1, g), &resp, parked.done());  // clock 2 needs worker 1 at >= 1
  EXPECT_FALSE(parked.status.has_value());
  ASSERT_TRUE(store->UpdateMembership(5, {0}).ok());  // worker 1 died at clock 0
  ASSERT_TRUE(parked.status.has_value());
  EXPECT_TRUE(parked.status->ok()) << *parked.status;
  EXPECT_EQ(resp.step(), 2);

  // Worker 4 joins at clock 2 (the slowest live worker's), so it does not hold worker 0 back at
  // once; it holds it back as soon as worker 0 is more than the staleness ahead of it.
  ASSERT_TRUE(store->UpdateMembership(6, {0, 4}).ok());
  Outcome ready;  // worker 0 at clock 3 needs every clock >= 2
  store->PushPull(AtEpoch(MakePush(0, 2, 1, g), 6), &resp, ready.done());
  ASSERT_TRUE(ready.status.has_value());
  EXPECT_TRUE(ready.status->ok()) << *ready.status;
  Outcome waits;  // worker 0 at clock 4 needs every clock >= 3
  store->PushPull(AtEpoch(MakePush(0, 3, 1, g), 6), &resp, waits.done());
  EXPECT_FALSE(waits.status.has_value());
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(4, 0, 1, g), 6)).ok());
  ASSERT_TRUE(waits.status.has_value());
  EXPECT_TRUE(waits.status->ok()) << *waits.status;
}

TEST(ParameterStoreMembershipTest, AsyncKeepsApplyingAcrossAnEpochChange) {
  auto store = MakeStore(MakeOptions(ASYNC, 2));
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, std::vector<float>(25, 1.0f))).ok());
  ASSERT_TRUE(store->UpdateMembership(5, {1, 7}).ok());
  EXPECT_EQ(store->step(), 1);
  EXPECT_EQ(PushNow(*store, AtEpoch(MakePush(0, 1, 1, std::vector<float>(25, 1.0f)), 5)).code(),
            absl::StatusCode::kAborted);
  ASSERT_TRUE(PushNow(*store, AtEpoch(MakePush(7, 0, 1, std::vector<float>(25, 1.0f)), 5)).ok());
  EXPECT_EQ(store->step(), 2);
}

PushRequest RoutedUnder(PushRequest req, int64_t version) {
  req.set_shard_map_version(version);
  return req;
}

TEST(ParameterStoreMembershipTest, RequestsRoutedUnderAnotherShardMapAreRefusedAndChangeNothing) {
  ShardMap map = OneServerMap();
  map.set_version(3);
  auto store = MakeStore(MakeOptions(SYNC, 2, map));
  const std::vector<float> w0 = Flat(store->Snapshot());
  for (int64_t version : {int64_t{2}, int64_t{4}, int64_t{0}}) {
    const absl::Status refused = PushNow(*store, RoutedUnder(MakePush(0, 0, 1, std::vector<float>(25, 9.0f)), version));
    EXPECT_EQ(refused.code(), absl::StatusCode::kAborted) << refused;
    EXPECT_THAT(std::string(refused.message()),
                HasSubstr("push from worker 0 was routed under shard map version " + std::to_string(version) +
                          "; server 0 serves version 3; fetch the cluster view and route again"));
    PullRequest pull = MakePull(1, 0);
    pull.set_shard_map_version(version);
    PullResponse resp;
    Outcome outcome;
    store->Pull(pull, &resp, outcome.done());
    ASSERT_TRUE(outcome.status.has_value());
    EXPECT_EQ(outcome.status->code(), absl::StatusCode::kAborted);
  }
  // A push of another map carries that map's chunks: the refusal is the map, not its shape (the
  // worker routes again rather than failing).
  PushRequest other_map = RoutedUnder(MakePush(0, 0, 1, std::vector<float>(25, 9.0f)), 2);
  other_map.mutable_chunks(0)->set_offset(7);  // e.g. the range another server count gives
  other_map.mutable_chunks(0)->set_length(13);
  const absl::Status other_shape = PushNow(*store, other_map);
  EXPECT_EQ(other_shape.code(), absl::StatusCode::kAborted) << other_shape;
  EXPECT_EQ(Flat(store->Snapshot()), w0);
  EXPECT_EQ(store->step(), 0);
  // Routed under the map it serves: the step goes on.
  ASSERT_TRUE(PushNow(*store, RoutedUnder(MakePush(0, 0, 1, std::vector<float>(25, 1.0f)), 3)).ok());
  ASSERT_TRUE(PushNow(*store, RoutedUnder(MakePush(1, 0, 1, std::vector<float>(25, 1.0f)), 3)).ok());
  EXPECT_EQ(store->step(), 1);

  // A job's first map (version 1) also takes unstamped requests (callers from before the field).
  map.set_version(1);
  auto first = MakeStore(MakeOptions(SYNC, 1, map));
  EXPECT_TRUE(PushNow(*first, MakePush(0, 0, 1, std::vector<float>(25, 1.0f))).ok());
  EXPECT_EQ(PushNow(*first, RoutedUnder(MakePush(0, 1, 1, std::vector<float>(25, 1.0f), 77), 2)).code(),
            absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace pstrain::server::store_test
