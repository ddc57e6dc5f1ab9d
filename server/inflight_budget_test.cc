#include "server/inflight_budget.h"

#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;

RequestLimits Limits(int64_t request, int64_t inflight) { return RequestLimits{request, inflight}; }

TEST(InflightBudgetTest, NoLimitsBeforeSetLimits) {
  InflightBudget budget;
  EXPECT_TRUE(budget.CheckSize("push", int64_t{1} << 40).ok());
  absl::StatusOr<InflightBudget::Ticket> a = budget.Admit("push", int64_t{1} << 40);
  absl::StatusOr<InflightBudget::Ticket> b = budget.Admit("push", int64_t{1} << 40);
  EXPECT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(budget.inflight_bytes(), int64_t{2} << 40);
}

TEST(InflightBudgetTest, OversizeRequestIsInvalidArgumentWithSizeAndLimit) {
  InflightBudget budget;
  budget.SetLimits(Limits(1000, 0));
  EXPECT_TRUE(budget.CheckSize("push", 1000).ok());
  const absl::Status s = budget.CheckSize("push", 1001);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "push: request of 1001 bytes exceeds this job's limit of 1000 bytes");
}

TEST(InflightBudgetTest, CallBeyondTheBoundIsRefusedAndChangesNothing) {
  InflightBudget budget(absl::Milliseconds(250));
  budget.SetLimits(Limits(0, 100));
  absl::StatusOr<InflightBudget::Ticket> a = budget.Admit("push", 60);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<InflightBudget::Ticket> b = budget.Admit("push", 41);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(b.status().message(),
            "push: 41 bytes would exceed the server's bound of 100 bytes in flight (60 held); retry after 250 ms");
  EXPECT_EQ(budget.inflight_bytes(), 60);
  absl::StatusOr<InflightBudget::Ticket> c = budget.Admit("push", 40);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(budget.inflight_bytes(), 100);
}

TEST(InflightBudgetTest, ReleasingATicketMakesRoom) {
  InflightBudget budget;
  budget.SetLimits(Limits(0, 100));
  {
    absl::StatusOr<InflightBudget::Ticket> a = budget.Admit("pull", 90);
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(budget.Admit("pull", 20).ok());
  }
  EXPECT_EQ(budget.inflight_bytes(), 0);
  EXPECT_TRUE(budget.Admit("pull", 20).ok());
  EXPECT_EQ(budget.inflight_bytes(), 0);  // the temporary ticket was released at once
}

TEST(InflightBudgetTest, MovedTicketReleasesOnce) {
  InflightBudget budget;
  budget.SetLimits(Limits(0, 100));
  absl::StatusOr<InflightBudget::Ticket> a = budget.Admit("push", 70);
  ASSERT_TRUE(a.ok());
  InflightBudget::Ticket moved = *std::move(a);
  InflightBudget::Ticket assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.bytes(), 70);
  EXPECT_EQ(budget.inflight_bytes(), 70);
  assigned = InflightBudget::Ticket();
  EXPECT_EQ(budget.inflight_bytes(), 0);
}

TEST(InflightBudgetTest, OneCallIsAdmittedWhenNothingIsInFlight) {
  InflightBudget budget;
  budget.SetLimits(Limits(0, 100));
  absl::StatusOr<InflightBudget::Ticket> big = budget.Admit("push", 500);
  EXPECT_TRUE(big.ok());
  EXPECT_FALSE(budget.Admit("push", 1).ok());
}

TEST(InflightBudgetTest, PullsTakeAtMostHalfSoPushesStillFit) {
  InflightBudget budget;
  budget.SetLimits(Limits(0, 100));
  absl::StatusOr<InflightBudget::Ticket> p1 = budget.Admit("pull", 30, /*reading=*/true);
  ASSERT_TRUE(p1.ok());
  absl::StatusOr<InflightBudget::Ticket> p2 = budget.Admit("pull", 30, /*reading=*/true);
  EXPECT_EQ(p2.status().message(),
            "pull: 30 bytes would exceed the server's bound of 50 bytes in flight (30 held); retry after 100 ms");
  absl::StatusOr<InflightBudget::Ticket> push = budget.Admit("push", 70);
  EXPECT_TRUE(push.ok());
  EXPECT_EQ(budget.inflight_bytes(), 100);
  // A pull within its half but past the whole bound is refused and leaves no count behind.
  EXPECT_FALSE(budget.Admit("pull", 10, /*reading=*/true).ok());
  push = InflightBudget::Ticket();
  EXPECT_TRUE(budget.Admit("pull", 20, /*reading=*/true).ok());
}

// Two tensors on two servers: 1000 floats on server 0 (two chunks), 500 on server 1.
ShardMap TwoServerMap() {
  ShardMap map;
  for (auto [tensor, offset, length, server] :
       {std::tuple{0, 0, 600, 0}, std::tuple{0, 600, 400, 0}, std::tuple{1, 0, 500, 1}}) {
    ChunkSpec* c = map.add_chunks();
    c->set_tensor_id(tensor);
    c->set_offset(offset);
    c->set_length(length);
    c->set_server_rank(server);
  }
  return map;
}

JobSpec DenseJob() {
  JobSpec job;
  job.set_num_workers(4);
  job.set_max_workers(6);
  job.set_batch_size(32);
  job.set_compression("none");
  return job;
}

TEST(RequestLimitsTest, DenseRequestLimitIsTheShardAsFloat32PlusSlack) {
  const RequestLimits limits = RequestLimitsForJob(DenseJob(), TwoServerMap(), {0});
  const int64_t push = 4 * 1000 + 2 * 40;  // floats and two chunk headers
  EXPECT_EQ(limits.max_request_bytes, push + push / 8 + kRequestHeadroomBytes);
  EXPECT_EQ(limits.typical_request_bytes, limits.max_request_bytes);  // no tables
  // 6 workers and an evaluator, each two pushes and one answer of the shard.
  EXPECT_EQ(limits.max_inflight_bytes, 7 * (2 * limits.max_request_bytes + 4 * 1000));
}

TEST(RequestLimitsTest, ReplicaTakesTheLargerShardAndBothAnswers) {
  const RequestLimits own = RequestLimitsForJob(DenseJob(), TwoServerMap(), {1});
  const RequestLimits both = RequestLimitsForJob(DenseJob(), TwoServerMap(), {1, 0});
  EXPECT_LT(own.max_request_bytes, both.max_request_bytes);
  EXPECT_EQ(both.max_request_bytes, RequestLimitsForJob(DenseJob(), TwoServerMap(), {0}).max_request_bytes);
  EXPECT_EQ(both.max_inflight_bytes, 7 * (2 * 2 * both.max_request_bytes + 4 * 1500));
}

TEST(RequestLimitsTest, TopKAtHighRatioAllowsIndexAndValuePairs) {
  JobSpec job = DenseJob();
  job.set_compression("topk:1");
  const int64_t push = 8 * 1000 + 2 * 40;
  EXPECT_EQ(RequestLimitsForJob(job, TwoServerMap(), {0}).max_request_bytes, push + push / 8 + kRequestHeadroomBytes);
  job.set_compression("fp16");  // may fall back to float32 per chunk
  EXPECT_EQ(RequestLimitsForJob(job, TwoServerMap(), {0}).max_request_bytes,
            RequestLimitsForJob(DenseJob(), TwoServerMap(), {0}).max_request_bytes);
}

TEST(RequestLimitsTest, TablesAddRowsForEverySampleOfAPush) {
  JobSpec job = DenseJob();
  job.set_mode(SYNC);
  job.set_global_batch(128);
  TableSpec* table = job.add_tables();
  table->set_name("C1");
  table->set_dim(16);
  const int64_t sparse = 128 * kKeysPerSampleAllowance * (8 + 64 + 8);
  const int64_t push = 4 * 1000 + 2 * 40 + sparse;
  EXPECT_EQ(RequestLimitsForJob(job, TwoServerMap(), {0}).max_request_bytes, push + push / 8 + kRequestHeadroomBytes);
  // A usual push: one key per sample.
  const int64_t typical = 4 * 1000 + 2 * 40 + 128 * (8 + 64 + 8);
  EXPECT_EQ(RequestLimitsForJob(job, TwoServerMap(), {0}).typical_request_bytes,
            typical + typical / 8 + kRequestHeadroomBytes);
}

}  // namespace
}  // namespace pstrain::server
