#include "server/server_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/metrics.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ServerMetricsTest : public ::testing::Test {
 protected:
  metrics::Registry registry_;
  ServerMetrics metrics_{&registry_};
};

TEST_F(ServerMetricsTest, ARoutedCallCountsItsBytesForItsShard) {
  metrics_.SetShards(2, 1);
  ServerMetrics::Call call(&metrics_, RpcMethod::kPush, 100);
  call.Route(ServerMetrics::kReplica);
  call.Answered(40);
  EXPECT_EQ(metrics_.requests(RpcMethod::kPush), 1);
  EXPECT_EQ(metrics_.received_bytes(ServerMetrics::kReplica), 100);
  EXPECT_EQ(metrics_.sent_bytes(ServerMetrics::kReplica), 40);
  EXPECT_EQ(metrics_.received_bytes(ServerMetrics::kOwn), 0);
  const std::string text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("pstrain_server_received_bytes_total{shard=\"1\"} 100\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_server_sent_bytes_total{shard=\"1\"} 40\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_server_received_bytes_total{shard=\"2\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_server_requests_total{method=\"Push\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_server_request_duration_seconds_count{method=\"Push\"} 1\n"));
}

TEST_F(ServerMetricsTest, ACallRefusedBeforeItsShardIsKnownCountsForNoShard) {
  ServerMetrics::Call call(&metrics_, RpcMethod::kPull, 30);
  call.Refused(absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(metrics_.received_bytes(ServerMetrics::kNone), 30);
  EXPECT_EQ(metrics_.refused(absl::StatusCode::kInvalidArgument), 1);
  const std::string text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("pstrain_server_refused_requests_total{cause=\"invalid_argument\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_server_refused_requests_total{cause=\"resource_exhausted\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_server_received_bytes_total{shard=\"none\"} 30\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_server_request_duration_seconds_count{method=\"Pull\"} 1\n"));
}

TEST_F(ServerMetricsTest, ARefusalAfterRoutingCountsTheBytesOnce) {
  metrics_.SetShards(0, std::nullopt);
  ServerMetrics::Call call(&metrics_, RpcMethod::kPushPull, 64);
  call.Route(ServerMetrics::kOwn);
  call.Refused(absl::StatusCode::kAborted);
  EXPECT_EQ(metrics_.received_bytes(ServerMetrics::kOwn), 64);
  EXPECT_EQ(metrics_.received_bytes(ServerMetrics::kNone), 0);
  EXPECT_EQ(metrics_.sent_bytes(ServerMetrics::kOwn), 0);
  EXPECT_EQ(metrics_.refused(absl::StatusCode::kAborted), 1);
}

TEST_F(ServerMetricsTest, InflightRequestsAreCallsNotAnsweredYet) {
  metrics_.SetShards(0, std::nullopt);
  ServerMetrics::Call parked(&metrics_, RpcMethod::kPull, 10);
  parked.Route(ServerMetrics::kOwn);
  EXPECT_THAT(registry_.Render(), HasSubstr("pstrain_server_inflight_requests 1\n"));
  parked.Answered(20);
  EXPECT_THAT(registry_.Render(), HasSubstr("pstrain_server_inflight_requests 0\n"));
}

TEST_F(ServerMetricsTest, TrafficSumsEveryShardMethodAndCause) {
  metrics_.SetShards(0, 1);
  ServerMetrics::Call a(&metrics_, RpcMethod::kPush, 100);
  a.Route(ServerMetrics::kOwn);
  a.Answered(8);
  ServerMetrics::Call b(&metrics_, RpcMethod::kPull, 50);
  b.Route(ServerMetrics::kReplica);
  b.Answered(400);
  ServerMetrics::Call c(&metrics_, RpcMethod::kPull, 7);
  c.Refused(absl::StatusCode::kPermissionDenied);
  metrics_.RefusedUnread(absl::StatusCode::kUnauthenticated);  // never read: no request, no bytes
  const ServerTraffic t = metrics_.Traffic();
  EXPECT_EQ(t.bytes_received(), 157);
  EXPECT_EQ(t.bytes_sent(), 408);
  EXPECT_EQ(t.requests(), 3);
  EXPECT_EQ(t.refused(), 2);
}

TEST_F(ServerMetricsTest, StoreSeriesAppearOnlyOnceUsed) {
  const StoreMetrics store = metrics_.ForShard(3);
  std::string text = registry_.Render();
  EXPECT_THAT(text, Not(HasSubstr("pstrain_server_checkpoint_age_seconds")));
  store.step_wait->Observe(0.25);
  store.checkpoints_written->Increment();
  text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("pstrain_server_step_wait_seconds_count{shard=\"3\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_server_checkpoints_written_total{shard=\"3\"} 1\n"));
}

TEST(RefusalCauseTest, IsTheCodeInSnakeCase) {
  EXPECT_EQ(RefusalCause(absl::StatusCode::kResourceExhausted), "resource_exhausted");
  EXPECT_EQ(RefusalCause(absl::StatusCode::kFailedPrecondition), "failed_precondition");
  EXPECT_EQ(RefusalCause(absl::StatusCode::kUnauthenticated), "unauthenticated");
}

}  // namespace
}  // namespace pstrain::server
