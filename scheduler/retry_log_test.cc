#include "scheduler/retry_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pstrain {
namespace scheduler {
namespace {

using ::testing::HasSubstr;

LeaseRequest Request(int rank, int64_t seq, int epoch, bool eval = false) {
  LeaseRequest request;
  request.set_worker_rank(rank);
  request.set_request_seq(seq);
  request.set_epoch(epoch);
  request.set_eval(eval);
  return request;
}

TEST(RetryLogTest, ARepeatedLeaseRequestGetsTheSameAnswer) {
  RetryLog log;
  ASSERT_FALSE(log.LeaseRetry(Request(1, 1, 0))->has_value());
  LeaseResponse answer;
  answer.set_lease_id(42);
  log.RecordLease(Request(1, 1, 0), answer);
  absl::StatusOr<std::optional<LeaseResponse>> again = log.LeaseRetry(Request(1, 1, 0));
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->lease_id(), 42);
  EXPECT_FALSE(log.LeaseRetry(Request(1, 2, 0))->has_value());
  EXPECT_FALSE(log.LeaseRetry(Request(2, 1, 0))->has_value());  // another worker
  EXPECT_FALSE(log.LeaseRetry(Request(1, 0, 0))->has_value());  // not numbered
}

TEST(RetryLogTest, RefusesStaleAndMismatchedRetries) {
  RetryLog log;
  log.RecordLease(Request(1, 5, 2), LeaseResponse());
  absl::StatusOr<std::optional<LeaseResponse>> stale = log.LeaseRetry(Request(1, 4, 2));
  EXPECT_TRUE(absl::IsAborted(stale.status()));
  EXPECT_THAT(stale.status().message(), HasSubstr("older than its last one (5)"));
  absl::StatusOr<std::optional<LeaseResponse>> other = log.LeaseRetry(Request(1, 5, 2, /*eval=*/true));
  EXPECT_TRUE(absl::IsInvalidArgument(other.status()));
  EXPECT_THAT(other.status().message(), HasSubstr("which was for epoch 2"));
}

TEST(RetryLogTest, ProgressCountsOnceAndSurvivesARestart) {
  RetryLog log;
  EXPECT_FALSE(log.ProgressApplied(3, 1));
  log.RecordProgress(3, 1);
  log.RecordProgress(3, 0);  // not numbered: not kept
  EXPECT_TRUE(log.ProgressApplied(3, 1));
  EXPECT_FALSE(log.ProgressApplied(3, 2));
  EXPECT_FALSE(log.ProgressApplied(3, 0));
  log.RecordLease(Request(4, 7, 1), LeaseResponse());
  SchedulerState state;
  log.Save(&state);
  RetryLog restored;
  restored.Restore(state);
  EXPECT_TRUE(restored.ProgressApplied(3, 1));
  EXPECT_TRUE(restored.LeaseRetry(Request(4, 7, 1))->has_value());
  restored.Forget([](int rank) { return rank == 3; });
  EXPECT_FALSE(restored.ProgressApplied(3, 1));
  EXPECT_TRUE(restored.LeaseRetry(Request(4, 7, 1))->has_value());
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
