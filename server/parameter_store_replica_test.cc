// What a store does as a shard's live copy (JobSpec.replicas = 2): backup pushes that answer once
// the step is applied, the same state as the primary, and no checkpoints until promoted.
#include <stdlib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server::store_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

PushRequest BackupPush(int rank, int64_t step) {
  PushRequest push = MakePush(rank, step, 3 + rank, WorkerGradient(rank, step));
  push.set_wait_until_applied(true);
  return push;
}

TEST(ParameterStoreReplicaTest, BackupPushAnswersOnceTheStepIsAppliedWithTheStep) {
  auto copy = MakeStore(MakeOptions(SYNC, 2));
  PushResponse first, second;
  Outcome first_outcome, second_outcome;
  copy->Push(BackupPush(0, 0), &first, first_outcome.done());
  EXPECT_FALSE(first_outcome.status.has_value()) << "answered before worker 1 pushed the step";
  copy->Push(BackupPush(1, 0), &second, second_outcome.done());
  ASSERT_TRUE(first_outcome.status.has_value() && first_outcome.status->ok());
  ASSERT_TRUE(second_outcome.status.has_value() && second_outcome.status->ok());
  EXPECT_EQ(first.step(), 1);
  EXPECT_EQ(second.step(), 1);
  // A recomputed push of the step just applied (after a membership change) answers at once.
  PushRequest again = BackupPush(0, 0);
  again.set_request_id(77);
  PushResponse third;
  EXPECT_TRUE(PushNow(*copy, again, &third).ok());
  EXPECT_EQ(third.step(), 1);
}

TEST(ParameterStoreReplicaTest, CopyFedTheSamePushesHoldsTheSameWeightsBitForBit) {
  auto primary = MakeStore(MakeOptions(SYNC, 2));
  auto copy = MakeStore(MakeOptions(SYNC, 2));
  for (int64_t t = 0; t < 5; ++t) {
    // Arrival order differs; the sum is in rank order either way.
    ASSERT_TRUE(PushNow(*primary, MakePush(0, t, 3, WorkerGradient(0, t))).ok());
    ASSERT_TRUE(PushNow(*primary, MakePush(1, t, 4, WorkerGradient(1, t))).ok());
    Outcome parked;
    PushResponse resp;
    copy->Push(BackupPush(1, t), &resp, parked.done());
    ASSERT_TRUE(PushNow(*copy, MakePush(0, t, 3, WorkerGradient(0, t))).ok());
    ASSERT_TRUE(parked.status.has_value() && parked.status->ok());
  }
  EXPECT_EQ(copy->step(), 5);
  EXPECT_EQ(Flat(copy->Snapshot()), Flat(primary->Snapshot()));
}

TEST(ParameterStoreReplicaTest, ParkedBackupPushIsAbortedByAMembershipChange) {
  auto copy = MakeStore(MakeOptions(SYNC, 2));
  PushResponse resp;
  Outcome outcome;
  copy->Push(BackupPush(0, 0), &resp, outcome.done());
  ASSERT_FALSE(outcome.status.has_value());
  ASSERT_TRUE(copy->UpdateMembership(5, {0, 1}).ok());
  ASSERT_TRUE(outcome.status.has_value());
  EXPECT_EQ(outcome.status->code(), absl::StatusCode::kAborted);
  EXPECT_THAT(outcome.status->message(), HasSubstr("recompute it"));
  EXPECT_EQ(copy->step(), 0);
}

TEST(ParameterStoreReplicaTest, CopyWritesNoCheckpointsUntilPromoted) {
  std::string dir = ::testing::TempDir() + "/replica-ckpt-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  ParameterStore::Options options = MakeOptions(SYNC, 1);
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_steps(1);
  options.write_checkpoints = false;
  auto copy = MakeStore(options);
  ASSERT_TRUE(PushNow(*copy, MakePush(0, 0, 1, WorkerGradient(0, 0))).ok());
  EXPECT_TRUE(ListCheckpointSteps(dir, 0).empty());
  copy->EnableCheckpoints();
  ASSERT_TRUE(PushNow(*copy, MakePush(0, 1, 1, WorkerGradient(0, 1))).ok());
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(2));
}

}  // namespace
}  // namespace pstrain::server::store_test
