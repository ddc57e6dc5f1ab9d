// The Scheduler's dashboard views on a clock the test moves by hand: stuck barriers, members with
// their metrics addresses, scrape targets, server traffic.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/json_test_util.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"
#include "scheduler/stuck_barriers.h"

namespace pstrain {
namespace scheduler {
namespace {

using test_util::Hb;
using test_util::Reg;
using test_util::TinyJobOptions;

class SchedulerDashboardTest : public ::testing::Test {
 protected:
  // A running 1-server, 2-worker SYNC job; everyone heartbeated at the start.
  std::unique_ptr<Scheduler> MakeRunning() {
    JobSpec job;
    job.set_num_servers(1);
    job.set_num_workers(2);
    job.set_epochs(1);
    job.set_batch_size(10);
    Scheduler::Options options = TinyJobOptions(job, 8, 50, 40, 3, [this] { return now_; });
    options.dead_after = absl::Seconds(60);  // Nobody dies while a barrier waits.
    options.stuck_barrier_after = absl::Seconds(10);
    auto s = Scheduler::Create(options);
    EXPECT_TRUE(s.ok()) << s.status();
    RegisterRequest server = Reg(SERVER, "h:1");
    server.set_metrics_address("h:9101");
    EXPECT_TRUE((*s)->Register(server).ok());
    RegisterRequest worker = Reg(WORKER, "h:2");
    worker.set_metrics_address("h:9102");
    EXPECT_TRUE((*s)->Register(worker).ok());
    EXPECT_TRUE((*s)->Register(Reg(WORKER, "h:3")).ok());  // Serves no metrics.
    EXPECT_EQ((*s)->state(), RUNNING);
    for (auto [role, rank] : {std::pair{SERVER, 0}, {WORKER, 0}, {WORKER, 1}}) {
      EXPECT_TRUE((*s)->Heartbeat(Hb(role, rank)).ok());
    }
    return std::move(s).value();
  }

  static BarrierRequest Enter(int worker) {
    BarrierRequest b;
    b.set_name("epoch-0-trained");
    b.set_rank(worker);
    return b;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(SchedulerDashboardTest, AStuckBarrierNamesWhoIsMissingUntilItOpens) {
  auto s = MakeRunning();
  int released = 0;
  s->Barrier(Enter(0), [&](absl::Status st) { released += st.ok(); });
  now_ += absl::Seconds(5);
  s->CheckHealth();
  EXPECT_TRUE(s->DashboardStatus().stuck_barriers.empty());  // 5 s: not stuck yet.

  now_ += absl::Seconds(6);
  EXPECT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Seconds(1);
  s->CheckHealth();
  const DashboardStatus status = s->DashboardStatus();
  ASSERT_EQ(status.stuck_barriers.size(), 1u);
  const StuckBarrierStatus& stuck = status.stuck_barriers[0];
  EXPECT_EQ(stuck.name, "epoch-0-trained");
  EXPECT_DOUBLE_EQ(stuck.waiting_seconds, 12);
  ASSERT_EQ(stuck.missing.size(), 1u);
  EXPECT_EQ(stuck.missing[0].role, "worker");
  EXPECT_EQ(stuck.missing[0].rank, 1);
  EXPECT_EQ(stuck.missing[0].address, "h:3");
  EXPECT_DOUBLE_EQ(stuck.missing[0].last_heartbeat_seconds_ago, 1);
  EXPECT_EQ(StuckBarrierLine(stuck),
            "barrier 'epoch-0-trained' has waited 12.0 s for worker 1 at h:3 (last heartbeat 1.0 s ago)");
  std::string summary = s->SummaryJson();
  EXPECT_NE(summary.find("\"stuck_barriers\": [{\"name\":\"epoch-0-trained\""), std::string::npos) << summary;

  s->Barrier(Enter(1), [&](absl::Status st) { released += st.ok(); });
  EXPECT_EQ(released, 2);
  s->CheckHealth();
  EXPECT_TRUE(s->DashboardStatus().stuck_barriers.empty());
  // The summary keeps it, released.
  summary = s->SummaryJson();
  google::protobuf::Value parsed;
  std::string error;
  ASSERT_TRUE(ParseJson(summary, &parsed, &error)) << error << "\n" << summary;
  const auto& kept = Member(parsed, "stuck_barriers").list_value();
  ASSERT_EQ(kept.values_size(), 1);
  EXPECT_TRUE(Member(kept.values(0), "released").bool_value());
  EXPECT_EQ(Member(Member(kept.values(0), "missing").list_value().values(0), "address").string_value(), "h:3");
}

TEST_F(SchedulerDashboardTest, StatusListsMembersTrafficAndTargets) {
  auto s = MakeRunning();
  HeartbeatRequest hb = Hb(SERVER, 0);
  hb.mutable_traffic()->set_bytes_sent(11);
  hb.mutable_traffic()->set_refused(2);
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(hb).ok());
  LeaveRequest leave;
  leave.set_role(WORKER);
  leave.set_rank(1);
  ASSERT_TRUE(s->Leave(leave).ok());
  const DashboardStatus status = s->DashboardStatus();
  EXPECT_EQ(status.state, "RUNNING");
  ASSERT_EQ(status.members.size(), 3u);
  EXPECT_EQ(status.members[0].metrics_address, "h:9101");
  EXPECT_DOUBLE_EQ(status.members[0].last_heartbeat_seconds_ago, 0);
  EXPECT_DOUBLE_EQ(status.members[1].last_heartbeat_seconds_ago, 2);
  EXPECT_EQ(status.members[2].state, "left");
  ASSERT_EQ(status.servers.size(), 1u);
  EXPECT_EQ(status.servers[0].bytes_sent, 11);
  EXPECT_EQ(status.servers[0].refused, 2);
  ASSERT_EQ(status.membership_events.size(), 1u);
  EXPECT_EQ(status.membership_events[0].kind, "left");
  EXPECT_DOUBLE_EQ(status.membership_events[0].seconds, 2);

  const std::vector<MetricsTarget> targets = s->MetricsTargets();
  ASSERT_EQ(targets.size(), 2u);  // Worker 1 serves none (and left).
  EXPECT_EQ(targets[0].address, "h:9101");
  EXPECT_EQ(targets[1].address, "h:9102");
  EXPECT_EQ(targets[1].labels[0].second, "worker");
  EXPECT_EQ(targets[1].labels[1].second, "0");

  const std::string summary = s->SummaryJson();
  EXPECT_NE(summary.find("\"servers\": [{\"rank\": 0, \"bytes_received\": 0, \"bytes_sent\": 11, \"requests\": 0, "
                         "\"refused\": 2}],"),
            std::string::npos)
      << summary;
}

// ASYNC: the end of an epoch waits for leases still out; a worker that holds one and goes quiet is
// named like a barrier's missing participant, until its lease completes.
TEST_F(SchedulerDashboardTest, AnEpochEndWaitingForALeaseNamesItsHolder) {
  JobSpec job;
  job.set_num_servers(1);
  job.set_num_workers(2);
  job.set_epochs(2);
  job.set_batch_size(10);
  job.set_mode(ASYNC);
  job.set_lease_batches(1);
  Scheduler::Options options = TinyJobOptions(job, 8, /*train_samples=*/20, 40, 4, [this] { return now_; });
  options.dead_after = absl::Seconds(60);
  options.stuck_barrier_after = absl::Seconds(10);
  auto created = Scheduler::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  Scheduler& s = **created;
  ASSERT_TRUE(s.Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(s.Register(Reg(WORKER, "h:2")).ok());
  ASSERT_TRUE(s.Register(Reg(WORKER, "h:3")).ok());
  for (auto [role, rank] : {std::pair{SERVER, 0}, {WORKER, 0}, {WORKER, 1}})
    ASSERT_TRUE(s.Heartbeat(Hb(role, rank)).ok());
  auto lease = [&](int rank) {
    LeaseRequest r;
    r.set_worker_rank(rank);
    r.set_epoch(0);
    absl::StatusOr<LeaseResponse> answer = s.LeaseWork(r);
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.value_or(LeaseResponse());
  };
  auto complete = [&](int rank, int64_t lease_id) {
    ProgressReport report;
    report.set_worker_rank(rank);
    report.set_epoch(0);
    LeaseProgress* p = report.add_leases();
    p->set_lease_id(lease_id);
    p->set_batches_done(1);
    EXPECT_TRUE(s.ReportProgress(report).ok());
    EXPECT_TRUE(s.Heartbeat(test_util::ConfirmedBy(0, report)).ok());
  };
  const LeaseResponse first = lease(0), second = lease(1);  // the epoch's two leases
  complete(0, first.lease_id());
  EXPECT_TRUE(lease(0).wait());  // worker 1 still holds the other
  s.CheckHealth();
  now_ += absl::Seconds(9);
  EXPECT_TRUE(s.Heartbeat(Hb(WORKER, 0)).ok());
  s.CheckHealth();
  EXPECT_TRUE(s.DashboardStatus().stuck_barriers.empty());  // 9 s since the watchdog first saw the wait
  now_ += absl::Seconds(3);
  s.CheckHealth();
  const DashboardStatus status = s.DashboardStatus();
  ASSERT_EQ(status.stuck_barriers.size(), 1u);
  EXPECT_EQ(status.stuck_barriers[0].name, "epoch-0-leases");
  ASSERT_EQ(status.stuck_barriers[0].missing.size(), 1u);
  EXPECT_EQ(status.stuck_barriers[0].missing[0].rank, 1);
  EXPECT_EQ(status.stuck_barriers[0].missing[0].address, "h:3");
  EXPECT_DOUBLE_EQ(status.stuck_barriers[0].missing[0].last_heartbeat_seconds_ago, 12);

  complete(1, second.lease_id());
  s.CheckHealth();
  EXPECT_TRUE(s.DashboardStatus().stuck_barriers.empty());
}

TEST(StuckBarrierLogTest, LogsOnceThenEveryRelogAndForgetsTheOldestReleased) {
  StuckBarrierLog log(absl::Seconds(30), /*max_kept=*/2);
  const absl::Time t0 = absl::FromUnixSeconds(100);
  StuckBarrierStatus a;
  a.name = "a";
  a.waiting_seconds = 11;
  log.Update({a}, t0);
  a.waiting_seconds = 20;
  log.Update({a}, t0 + absl::Seconds(9));
  ASSERT_EQ(log.Kept().size(), 1u);
  EXPECT_DOUBLE_EQ(log.Kept()[0].waiting_seconds, 20);  // Kept current, logged once.
  EXPECT_FALSE(log.Kept()[0].released);
  log.Update({}, t0 + absl::Seconds(10));
  EXPECT_TRUE(log.Kept()[0].released);
  StuckBarrierStatus b = a, c = a;
  b.name = "b";
  c.name = "c";
  log.Update({b}, t0 + absl::Seconds(11));
  log.Update({c}, t0 + absl::Seconds(12));  // b is released now; a, released first, goes.
  const std::vector<StuckBarrierStatus> kept = log.Kept();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].name, "b");
  EXPECT_TRUE(kept[0].released);
  EXPECT_EQ(kept[1].name, "c");
  EXPECT_FALSE(kept[1].released);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
