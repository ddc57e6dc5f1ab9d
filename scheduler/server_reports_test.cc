#include "scheduler/server_reports.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/time.h"

namespace pstrain {
namespace scheduler {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kStart = absl::FromUnixSeconds(1000);

HeartbeatRequest ServerHeartbeat(int rank, int shard, bool replica, int64_t rows) {
  HeartbeatRequest heartbeat;
  heartbeat.set_role(SERVER);
  heartbeat.set_rank(rank);
  TableUsage* usage = heartbeat.add_tables();
  usage->set_table("C1");
  usage->set_shard(shard);
  usage->set_replica(replica);
  usage->set_rows(rows);
  usage->set_bytes(rows * 100);
  usage->set_floor_bytes(rows * 64);
  heartbeat.mutable_traffic()->set_requests(rank + 10);
  return heartbeat;
}

TEST(ServerReportsTest, TableTotalsCountEachShardOnceFromItsPrimary) {
  ServerReports reports(kStart);
  EXPECT_EQ(reports.TableUsageJson({0, 1}), "");
  // Server 0 holds shard 0 and a copy of shard 1; server 1 holds shard 1.
  HeartbeatRequest zero = ServerHeartbeat(0, 0, false, 10);
  *zero.add_tables() = ServerHeartbeat(0, 1, true, 99).tables(0);
  reports.AddHeartbeat(zero, kStart + absl::Seconds(1));
  reports.AddHeartbeat(ServerHeartbeat(1, 1, false, 20), kStart + absl::Seconds(2));
  EXPECT_THAT(reports.TableUsageJson({0, 1}), HasSubstr("\"embedding_tables\": {\"rows\": 30, \"bytes\": 3000"));
  // Server 1 gone: its shard's copy on server 0 counts.
  EXPECT_THAT(reports.TableUsageJson({0}), HasSubstr("\"rows\": 109,"));
  EXPECT_THAT(reports.ServersJson(),
              HasSubstr("{\"rank\": 1, \"bytes_received\": 0, \"bytes_sent\": 0, \"requests\": 11"));
  DashboardStatus status;
  reports.FillDashboard(&status);
  EXPECT_EQ(status.servers.size(), 2u);
  EXPECT_EQ(status.table_history.size(), 2u);
}

TEST(ServerReportsTest, KeepsTheNewestSlowSteps) {
  ServerReports reports(kStart);
  for (int step = 0; step < ServerReports::kMaxSlowSteps + 5; ++step) {
    SlowStepReport report;
    report.set_server_rank(0);
    report.set_step(step);
    report.set_waited_ms(1500);
    report.add_waiting_for(3);
    reports.AddSlowStep(report, kStart + absl::Seconds(step));
  }
  const std::string json = reports.SlowStepsJson();
  EXPECT_THAT(json, Not(HasSubstr("\"step\": 4,")));
  EXPECT_THAT(json,
              HasSubstr("{\"seconds\": 5, \"server\": 0, \"step\": 5, \"waited_seconds\": 1.5, \"waiting_for\": [3]}"));
  DashboardStatus status;
  reports.FillDashboard(&status);
  EXPECT_EQ(status.slow_steps.size(), static_cast<size_t>(ServerReports::kMaxSlowSteps));
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
