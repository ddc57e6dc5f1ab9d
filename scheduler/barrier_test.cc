#include "scheduler/barrier.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

// Records what each callback got.
struct Answers {
  std::vector<std::string> log;
  BarrierSet::Done For(const std::string& who) {
    return [this, who](absl::Status s) { log.push_back(who + ":" + absl::StatusCodeToString(s.code())); };
  }
};

TEST(BarrierTest, ReleasesEveryoneWhenTheCountIsReached) {
  BarrierSet barriers;
  Answers answers;
  barriers.Enter("epoch 0", 3, "worker 0", answers.For("w0"));
  barriers.Enter("epoch 0", 3, "worker 1", answers.For("w1"));
  EXPECT_TRUE(answers.log.empty());
  EXPECT_EQ(barriers.num_pending(), 1);
  barriers.Enter("epoch 0", 3, "worker 2", answers.For("w2"));
  EXPECT_EQ(answers.log, (std::vector<std::string>{"w0:OK", "w1:OK", "w2:OK"}));
  EXPECT_EQ(barriers.num_pending(), 0);
}

TEST(BarrierTest, SameParticipantCountsOnceButIsAnsweredTwice) {
  BarrierSet barriers;
  Answers answers;
  barriers.Enter("b", 2, "worker 0", answers.For("w0a"));
  barriers.Enter("b", 2, "worker 0", answers.For("w0b"));
  EXPECT_TRUE(answers.log.empty());
  barriers.Enter("b", 2, "worker 1", answers.For("w1"));
  EXPECT_EQ(answers.log, (std::vector<std::string>{"w0a:OK", "w0b:OK", "w1:OK"}));
}

TEST(BarrierTest, BarriersAreIndependentAndOneShot) {
  BarrierSet barriers;
  Answers answers;
  barriers.Enter("a", 1, "worker 0", answers.For("a0"));
  barriers.Enter("b", 2, "worker 0", answers.For("b0"));
  EXPECT_EQ(answers.log, (std::vector<std::string>{"a0:OK"}));
  // A released barrier answers a late (retried) entry at once.
  barriers.Enter("a", 1, "worker 0", answers.For("a0-retry"));
  EXPECT_EQ(answers.log, (std::vector<std::string>{"a0:OK", "a0-retry:OK"}));
  EXPECT_EQ(barriers.num_pending(), 1);
}

TEST(BarrierTest, MismatchedCountIsInvalidArgument) {
  BarrierSet barriers;
  Answers answers;
  barriers.Enter("b", 2, "worker 0", answers.For("w0"));
  barriers.Enter("b", 3, "server 0", answers.For("s0"));
  barriers.Enter("c", 0, "worker 0", answers.For("c"));
  EXPECT_EQ(answers.log, (std::vector<std::string>{"s0:INVALID_ARGUMENT", "c:INVALID_ARGUMENT"}));
}

TEST(BarrierTest, FailAllAnswersParkedAndLaterEntries) {
  BarrierSet barriers;
  Answers answers;
  barriers.Enter("a", 2, "worker 0", answers.For("a0"));
  barriers.Enter("b", 2, "worker 1", answers.For("b1"));
  barriers.FailAll(absl::AbortedError("job failed: boom"));
  std::sort(answers.log.begin(), answers.log.end());  // Barriers are answered in no set order.
  EXPECT_EQ(answers.log, (std::vector<std::string>{"a0:ABORTED", "b1:ABORTED"}));
  barriers.Enter("a", 2, "worker 1", answers.For("a1"));
  EXPECT_EQ(answers.log.back(), "a1:ABORTED");
  EXPECT_EQ(barriers.num_pending(), 0);
}

TEST(BarrierTest, CallbackMayReenterTheSet) {
  BarrierSet barriers;
  Answers answers;
  barriers.Enter("first", 1, "worker 0", [&](absl::Status s) {
    barriers.Enter("second", 1, "worker 0", answers.For("second"));
  });
  EXPECT_EQ(answers.log, (std::vector<std::string>{"second:OK"}));
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
