// The scheduler's side of changing the server count (scheduler_scaling.cc): an operator's request,
// the added server waiting outside the map, the cut-over at the first new checkpoint cut, a drained
// server leaving, and every refusal leaving the job as it was.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"

namespace pstrain {
namespace scheduler {
namespace {

using test_util::Hb;
using test_util::TinyJobOptions;

using ::testing::HasSubstr;

class SchedulerScalingTest : public ::testing::Test {
 protected:
  // A running job of 2 servers (h:0, h:1) and 2 workers; everyone heartbeated. Records the server
  // counts the scheduler asks to record in `recorded_`.
  std::unique_ptr<Scheduler> MakeRunning(Mode mode = SYNC, bool checkpoints = true) {
    JobSpec job;
    job.set_mode(mode);
    job.set_num_servers(2);
    job.set_num_workers(2);
    job.set_epochs(1);
    job.set_batch_size(10);
    if (checkpoints) {
      job.set_checkpoint_dir("ckpt");
      job.set_checkpoint_every_steps(10);
    }
    Scheduler::Options options = TinyJobOptions(job, 30, 50, 40, 5, [this] { return now_; });
    options.record_server_count = [this](int64_t step, int servers) {
      recorded_.push_back({step, servers});
      return absl::OkStatus();
    };
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(std::move(options));
    EXPECT_TRUE(s.ok()) << s.status();
    for (const char* address : {"h:0", "h:1", "w:0", "w:1"}) EXPECT_TRUE((*s)->Register(Reg(address)).ok());
    EXPECT_EQ((*s)->state(), RUNNING);
    for (int rank : {0, 1}) EXPECT_TRUE((*s)->Heartbeat(Hb(SERVER, rank)).ok());
    return std::move(s).value();
  }

  static RegisterRequest Reg(const std::string& address) {
    RegisterRequest r;
    r.set_role(address[0] == 'h' ? SERVER : WORKER);
    r.set_address(address);
    return r;
  }
  static ScaleRequest To(int servers) {
    ScaleRequest r;
    r.set_servers(servers);
    return r;
  }
  static absl::Status Report(Scheduler* s, int rank, std::vector<int64_t> steps) {
    CheckpointReport r;
    r.set_server_rank(rank);
    for (int64_t step : steps) r.add_steps(step);
    return s->ReportCheckpoints(r);
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::vector<std::pair<int64_t, int>> recorded_;
};

TEST_F(SchedulerScalingTest, GrowingWaitsForTheAddedServerAndCutsOverAtTheNextCut) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  const ClusterView before = s->View();
  EXPECT_EQ(before.shard_map().version(), 1);
  EXPECT_EQ(before.shard_map().num_servers(), 2);

  absl::StatusOr<ScaleResponse> up = s->Scale(To(3));
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_THAT(up->plan(), HasSubstr("2 -> 3 servers: waiting for 1 server to register (ranks 2..2)"));
  EXPECT_EQ(up->shard_map_version(), 1);
  // A second change while this one is pending is refused, naming it.
  absl::StatusOr<ScaleResponse> second = s->Scale(To(4));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("the change 2 -> 3 servers is still pending"));

  // The added server registers outside the map; its checkpoint report changes nothing.
  absl::StatusOr<RegisterResponse> added = s->Register(Reg("h:2"));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->rank(), 2);
  EXPECT_TRUE(Report(s.get(), 2, {}).ok());
  EXPECT_EQ(s->View().shard_map().version(), 1);
  // The cut that existed when it became ready is not the cut-over's: a newer one is.
  ASSERT_TRUE(Report(s.get(), 0, {10, 20}).ok());
  EXPECT_EQ(s->View().shard_map().version(), 1);
  const int64_t epoch_before = s->View().membership_epoch();
  ASSERT_TRUE(Report(s.get(), 1, {10, 20}).ok());

  const ClusterView after = s->View();
  EXPECT_EQ(after.shard_map().version(), 2);
  EXPECT_EQ(after.shard_map().num_servers(), 3);
  EXPECT_GT(after.membership_epoch(), epoch_before);
  EXPECT_EQ(after.restore_step(), 20);
  EXPECT_EQ(after.restore_servers(), 2);
  EXPECT_EQ(after.restore_epoch(), after.membership_epoch());
  EXPECT_EQ(after.servers_size(), 3);
  EXPECT_THAT(recorded_, ::testing::ElementsAre(std::make_pair(int64_t{20}, 3)));
  bool server_two_owns = false;
  for (const ChunkSpec& c : after.shard_map().chunks()) server_two_owns |= c.server_rank() == 2;
  EXPECT_TRUE(server_two_owns);
}

TEST_F(SchedulerScalingTest, ShrinkingDrainsTheHighestRankWhichThenLeaves) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  absl::StatusOr<ScaleResponse> down = s->Scale(To(1));
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_THAT(down->plan(), HasSubstr("servers 1..1 are drained"));
  ASSERT_TRUE(Report(s.get(), 0, {10, 20}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10, 20}).ok());
  ClusterView view = s->View();
  EXPECT_EQ(view.shard_map().num_servers(), 1);
  EXPECT_EQ(view.restore_step(), 20);
  EXPECT_EQ(view.restore_servers(), 2);
  // The drained server is a member until it leaves; then it is gone and nothing else changes.
  EXPECT_EQ(view.servers_size(), 2);
  LeaveRequest leave;
  leave.set_role(SERVER);
  leave.set_rank(1);
  leave.set_reason("drained");
  ASSERT_TRUE(s->Leave(leave).ok());
  view = s->View();
  EXPECT_EQ(view.servers_size(), 1);
  EXPECT_EQ(s->state(), RUNNING);
  // A server of the map still may not leave.
  leave.set_rank(0);
  EXPECT_EQ(s->Leave(leave).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerScalingTest, NoWorkerIsEvictedForHoldingOthersUpWhileAServerRestoresTheCut) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  ASSERT_TRUE(s->Scale(To(1)).ok());
  ASSERT_TRUE(Report(s.get(), 0, {10, 20}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10, 20}).ok());
  const int64_t restore_epoch = s->View().restore_epoch();
  // Server 0 restores the cut (its store serves the old epoch); a worker's push reached a server
  // that serves, which waits for the other worker's.
  auto beat = [&](int64_t store_epoch) {
    now_ += absl::Seconds(1);
    HeartbeatRequest server = Hb(SERVER, 0);
    server.set_store_epoch(store_epoch);
    EXPECT_TRUE(s->Heartbeat(server).ok());
    EXPECT_TRUE(s->Heartbeat(Hb(SERVER, 1)).ok());
    for (int worker : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(WORKER, worker)).ok());
    s->CheckHealth();
  };
  SlowStepReport slow;
  slow.set_server_rank(0);
  slow.set_step(21);
  slow.set_waited_ms(1000);
  slow.set_typical_ms(10);
  slow.add_waiting_for(1);
  ASSERT_TRUE(s->ReportSlowStep(slow).ok());
  for (int i = 0; i < 6; ++i) beat(restore_epoch - 1);
  EXPECT_EQ(s->View().workers_size(), 2);
  // Once it serves, the wait counts from then: dead_after (3 s) later the worker is evicted.
  for (int i = 0; i < 2; ++i) beat(restore_epoch);
  EXPECT_EQ(s->View().workers_size(), 2);
  for (int i = 0; i < 2; ++i) beat(restore_epoch);
  EXPECT_EQ(s->View().workers_size(), 1);
  EXPECT_EQ(s->state(), RUNNING);
}

TEST_F(SchedulerScalingTest, BadRequestsAreRefusedAndChangeNothing) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  const ClusterView before = s->View();
  for (int servers : {0, -1, ServerScaling::kMaxServers + 1, 2}) {
    absl::StatusOr<ScaleResponse> refused = s->Scale(To(servers));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << servers;
  }
  EXPECT_THAT(s->Scale(To(0)).status().message(), HasSubstr("scale to 0 servers: expected a count in [1, 1024]"));
  EXPECT_THAT(s->Scale(To(2)).status().message(), HasSubstr("the job has 2 already"));
  // A server that registers without a pending change is refused (no rank is vacant).
  EXPECT_FALSE(s->Register(Reg("h:9")).ok());
  EXPECT_EQ(s->View().membership_epoch(), before.membership_epoch());

  std::unique_ptr<Scheduler> async = MakeRunning(ASYNC);
  EXPECT_THAT(async->Scale(To(3)).status().message(), HasSubstr("only SYNC jobs change their server count yet"));
  std::unique_ptr<Scheduler> no_checkpoints = MakeRunning(SYNC, /*checkpoints=*/false);
  EXPECT_THAT(no_checkpoints->Scale(To(3)).status().message(), HasSubstr("the job writes no checkpoints"));
  EXPECT_EQ(no_checkpoints->View().shard_map().version(), 1);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
