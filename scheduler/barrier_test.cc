#include "scheduler/barrier.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

constexpr BarrierSet::Group kWorkers = BarrierRequest::WORKERS;
constexpr BarrierSet::Group kAll = BarrierRequest::ALL;

// A BarrierSet whose answers are run at once, recording what each callback got.
class Barriers {
 public:
  std::vector<std::string> log;

  BarrierSet::Done For(const std::string& who) {
    return [this, who](absl::Status s) { log.push_back(who + ":" + absl::StatusCodeToString(s.code())); };
  }
  void Enter(const std::string& name, BarrierSet::Group group, const std::string& key, const std::string& who) {
    BarrierSet::Answers answers;
    set.Enter(name, group, key, For(who), &answers);
    RunAnswers(std::move(answers));
  }
  void SetParticipants(BarrierSet::Group group, const std::vector<std::string>& keys) {
    BarrierSet::Answers answers;
    set.SetParticipants(group, keys, &answers);
    RunAnswers(std::move(answers));
  }
  void FailAll(absl::Status status) {
    BarrierSet::Answers answers;
    set.FailAll(std::move(status), &answers);
    RunAnswers(std::move(answers));
  }

  BarrierSet set;
};

const std::vector<std::string> kThreeWorkers = {"worker 0", "worker 1", "worker 2"};

TEST(BarrierTest, ReleasesEveryoneWhenEveryLiveParticipantEntered) {
  Barriers b;
  b.SetParticipants(kWorkers, kThreeWorkers);
  b.Enter("epoch 0", kWorkers, "worker 0", "w0");
  b.Enter("epoch 0", kWorkers, "worker 1", "w1");
  EXPECT_TRUE(b.log.empty());
  EXPECT_EQ(b.set.num_pending(), 1);
  b.Enter("epoch 0", kWorkers, "worker 2", "w2");
  EXPECT_EQ(b.log, (std::vector<std::string>{"w0:OK", "w1:OK", "w2:OK"}));
  EXPECT_EQ(b.set.num_pending(), 0);
}

TEST(BarrierTest, PendingBarriersListWhenTheyStartedAndWhoIsMissing) {
  Barriers b;
  const absl::Time t0 = absl::FromUnixSeconds(50);
  BarrierSet::Answers answers;
  b.set.Enter("later", kWorkers, "worker 0", b.For("w0"), &answers, t0);  // Participants unknown yet.
  EXPECT_TRUE(b.set.PendingBarriers().empty());
  b.SetParticipants(kWorkers, kThreeWorkers);
  b.set.Enter("epoch 0", kWorkers, "worker 1", b.For("w1"), &answers, t0 + absl::Seconds(1));
  b.set.Enter("epoch 0", kWorkers, "worker 0", b.For("w0"), &answers, t0 + absl::Seconds(2));
  const std::vector<BarrierSet::Pending> pending = b.set.PendingBarriers();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].name, "epoch 0");
  EXPECT_EQ(pending[0].since, t0 + absl::Seconds(1));  // Its first Enter.
  EXPECT_EQ(pending[0].missing, (std::vector<std::string>{"worker 2"}));
  EXPECT_EQ(pending[1].name, "later");
  EXPECT_EQ(pending[1].missing, (std::vector<std::string>{"worker 1", "worker 2"}));
  b.SetParticipants(kWorkers, {"worker 0", "worker 1"});  // worker 2 died: "epoch 0" opens.
  const std::vector<BarrierSet::Pending> left = b.set.PendingBarriers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].name, "later");
  EXPECT_EQ(left[0].missing, (std::vector<std::string>{"worker 1"}));
  RunAnswers(std::move(answers));
}

TEST(BarrierTest, DeathOfTheLastMissingParticipantReleasesTheBarrier) {
  Barriers b;
  b.SetParticipants(kWorkers, kThreeWorkers);
  b.Enter("epoch 0", kWorkers, "worker 0", "w0");
  b.Enter("epoch 0", kWorkers, "worker 2", "w2");
  EXPECT_TRUE(b.log.empty());
  b.SetParticipants(kWorkers, {"worker 0", "worker 2"});  // Worker 1 died.
  EXPECT_EQ(b.log, (std::vector<std::string>{"w0:OK", "w2:OK"}));
  EXPECT_EQ(b.set.num_pending(), 0);
}

TEST(BarrierTest, ALaterJoinerIsNotWaitedForButMayEnter) {
  Barriers b;
  b.SetParticipants(kWorkers, {"worker 0", "worker 1"});
  b.Enter("e", kWorkers, "worker 0", "w0");
  b.SetParticipants(kWorkers, {"worker 0", "worker 1", "worker 2"});  // Worker 2 joined.
  b.Enter("e", kWorkers, "worker 2", "w2");
  EXPECT_TRUE(b.log.empty());
  b.Enter("e", kWorkers, "worker 1", "w1");
  EXPECT_EQ(b.log, (std::vector<std::string>{"w0:OK", "w2:OK", "w1:OK"}));
  // A rank that died and was taken by a newcomer is not waited for either.
  b.Enter("f", kWorkers, "worker 0", "f0");
  b.SetParticipants(kWorkers, {"worker 0", "worker 2"});
  b.SetParticipants(kWorkers, {"worker 0", "worker 1", "worker 2"});
  b.Enter("f", kWorkers, "worker 2", "f2");
  EXPECT_EQ(b.log.back(), "f2:OK");
}

TEST(BarrierTest, WaitsUntilTheParticipantsAreKnown) {
  Barriers b;
  b.Enter("start", kAll, "server 0", "s0");
  b.Enter("start", kAll, "worker 0", "w0");
  EXPECT_TRUE(b.log.empty());
  // Published when the job runs; the barrier then waits for all of them.
  b.SetParticipants(kAll, {"server 0", "worker 0", "worker 1"});
  EXPECT_TRUE(b.log.empty());
  b.Enter("start", kAll, "worker 1", "w1");
  EXPECT_EQ(b.log, (std::vector<std::string>{"s0:OK", "w0:OK", "w1:OK"}));
}

TEST(BarrierTest, GroupsHaveTheirOwnParticipants) {
  Barriers b;
  b.SetParticipants(kWorkers, {"worker 0"});
  b.SetParticipants(kAll, {"server 0", "worker 0"});
  b.Enter("all", kAll, "worker 0", "all-w0");
  b.Enter("workers", kWorkers, "worker 0", "workers-w0");
  EXPECT_EQ(b.log, (std::vector<std::string>{"workers-w0:OK"}));
  b.Enter("all", kAll, "server 0", "all-s0");
  EXPECT_EQ(b.log, (std::vector<std::string>{"workers-w0:OK", "all-w0:OK", "all-s0:OK"}));
}

TEST(BarrierTest, SameParticipantCountsOnceButIsAnsweredTwice) {
  Barriers b;
  b.SetParticipants(kWorkers, {"worker 0", "worker 1"});
  b.Enter("b", kWorkers, "worker 0", "w0a");
  b.Enter("b", kWorkers, "worker 0", "w0b");
  EXPECT_TRUE(b.log.empty());
  b.Enter("b", kWorkers, "worker 1", "w1");
  EXPECT_EQ(b.log, (std::vector<std::string>{"w0a:OK", "w0b:OK", "w1:OK"}));
}

TEST(BarrierTest, BarriersAreIndependentAndOneShot) {
  Barriers b;
  b.SetParticipants(kWorkers, {"worker 0", "worker 1"});
  b.Enter("a", kWorkers, "worker 0", "a0");
  b.Enter("a", kWorkers, "worker 1", "a1");
  b.Enter("b", kWorkers, "worker 0", "b0");
  EXPECT_EQ(b.log, (std::vector<std::string>{"a0:OK", "a1:OK"}));
  // A released barrier answers a late (retried) entry at once.
  b.Enter("a", kWorkers, "worker 0", "a0-retry");
  EXPECT_EQ(b.log.back(), "a0-retry:OK");
  EXPECT_EQ(b.set.num_pending(), 1);
}

TEST(BarrierTest, EnteringForAnotherGroupIsInvalidArgument) {
  Barriers b;
  b.SetParticipants(kWorkers, {"worker 0", "worker 1"});
  b.Enter("b", kWorkers, "worker 0", "w0");
  b.Enter("b", kAll, "server 0", "s0");
  EXPECT_EQ(b.log, (std::vector<std::string>{"s0:INVALID_ARGUMENT"}));
  EXPECT_EQ(b.set.num_pending(), 1);
}

TEST(BarrierTest, FailAllAnswersParkedAndLaterEntries) {
  Barriers b;
  b.SetParticipants(kWorkers, {"worker 0", "worker 1"});
  b.Enter("a", kWorkers, "worker 0", "a0");
  b.Enter("b", kWorkers, "worker 1", "b1");
  b.FailAll(absl::AbortedError("job failed: boom"));
  std::sort(b.log.begin(), b.log.end());  // Barriers are answered in no set order.
  EXPECT_EQ(b.log, (std::vector<std::string>{"a0:ABORTED", "b1:ABORTED"}));
  b.Enter("a", kWorkers, "worker 1", "a1");
  EXPECT_EQ(b.log.back(), "a1:ABORTED");
  EXPECT_EQ(b.set.num_pending(), 0);
}

TEST(BarrierTest, NoCallbackRunsInsideACall) {
  BarrierSet set;
  BarrierSet::Answers answers;
  set.SetParticipants(kWorkers, {"worker 0"}, &answers);
  bool ran = false;
  set.Enter(
      "first", kWorkers, "worker 0", [&](absl::Status s) { ran = s.ok(); }, &answers);
  EXPECT_FALSE(ran);
  ASSERT_EQ(answers.size(), 1u);
  RunAnswers(std::move(answers));
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
