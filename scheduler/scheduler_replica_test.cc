// The scheduler's side of --replicas=2: where each shard lives, promotion of a dead server's copy
// (no vacancy, no rollback), a restarted server being turned away, and the loss of a last copy.
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

class SchedulerReplicaTest : public ::testing::Test {
 protected:
  // A running SYNC job with 3 servers (h:0..h:2), 2 workers and --replicas=2; everyone heartbeated.
  std::unique_ptr<Scheduler> MakeRunning(bool checkpoints = false) {
    JobSpec job;
    job.set_num_servers(3);
    job.set_num_workers(2);
    job.set_epochs(1);
    job.set_batch_size(10);
    job.set_replicas(2);
    if (checkpoints) {
      job.set_checkpoint_dir("ckpt");
      job.set_checkpoint_every_steps(10);
    }
    absl::StatusOr<std::unique_ptr<Scheduler>> s =
        Scheduler::Create(TinyJobOptions(job, 30, 50, 40, 3, [this] { return now_; }));
    EXPECT_TRUE(s.ok()) << s.status();
    for (const char* address : {"h:0", "h:1", "h:2", "w:0", "w:1"}) {
      RegisterRequest r;
      r.set_role(address[0] == 'h' ? SERVER : WORKER);
      r.set_address(address);
      EXPECT_TRUE((*s)->Register(r).ok());
    }
    EXPECT_EQ((*s)->state(), RUNNING);
    for (int rank : {0, 1, 2}) EXPECT_TRUE((*s)->Heartbeat(Hb(SERVER, rank)).ok());
    return std::move(s).value();
  }

  // 3.5 s pass; every live server but `silent` heartbeats halfway; the watchdog runs.
  void LetServerDie(Scheduler* s, int silent) {
    now_ += absl::Seconds(2);
    const ClusterView view = s->View();
    for (const ServerInfo& server : view.servers()) {
      if (server.rank() != silent) {
        EXPECT_TRUE(s->Heartbeat(Hb(SERVER, server.rank())).ok());
      }
    }
    now_ += absl::Milliseconds(1500);
    s->CheckHealth();
  }

  // "primary/backup" per shard, backup "-" when unset.
  static std::vector<std::string> Hosts(const ClusterView& view) {
    std::vector<std::string> out;
    for (const ShardHost& h : view.shard_hosts()) {
      out.push_back(std::to_string(h.primary()) + "/" + (h.has_backup() ? std::to_string(h.backup()) : "-"));
    }
    return out;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(SchedulerReplicaTest, EachShardStartsOnItsServerWithItsCopyOnTheNext) {
  auto s = MakeRunning();
  ClusterView view = s->View();
  EXPECT_THAT(Hosts(view), ::testing::ElementsAre("0/1", "1/2", "2/0"));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(view.shard_hosts(i).shard(), i);
}

TEST_F(SchedulerReplicaTest, DeadServersCopyIsPromotedWithoutRollback) {
  // Checkpoints too: replicas take precedence, so no vacancy and no restore_step.
  auto s = MakeRunning(/*checkpoints=*/true);
  const int64_t epoch = s->View().membership_epoch();
  LetServerDie(s.get(), 1);
  EXPECT_EQ(s->state(), RUNNING);
  ClusterView view = s->View();
  EXPECT_EQ(view.membership_epoch(), epoch + 1);
  EXPECT_EQ(view.servers_size(), 2);
  // Shard 1 moves to server 2 (its copy), shard 0 lost its copy on server 1.
  EXPECT_THAT(Hosts(view), ::testing::ElementsAre("0/-", "2/-", "2/0"));
  EXPECT_FALSE(view.has_restore_step());
  // The dead server is fenced: its heartbeats are refused.
  EXPECT_EQ(s->Heartbeat(Hb(SERVER, 1)).status().code(), absl::StatusCode::kFailedPrecondition);
  // Long after, the job still runs (no recovery timeout: nothing waits for a replacement).
  now_ += absl::Seconds(120);
  for (int rank : {0, 2}) ASSERT_TRUE(s->Heartbeat(Hb(SERVER, rank)).ok());
  s->CheckHealth();
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_NE(s->SummaryJson().find("\"role\": \"server\", \"rank\": 1, \"kind\": \"died\""), std::string::npos);
}

TEST_F(SchedulerReplicaTest, RestartedServerIsNotNeeded) {
  auto s = MakeRunning();
  RegisterRequest again;
  again.set_role(SERVER);
  again.set_address("h:0");
  EXPECT_EQ(s->Register(again)->rank(), 0);  // a retry of a live server keeps its rank
  LetServerDie(s.get(), 0);
  const int64_t epoch = s->View().membership_epoch();
  RegisterRequest restarted;
  restarted.set_role(SERVER);
  restarted.set_address("h:9");
  absl::Status status = s->Register(restarted).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr("every shard is served (shard 0 on server 1, no copy;"));
  EXPECT_EQ(s->View().membership_epoch(), epoch);
  EXPECT_EQ(s->View().servers_size(), 2);
}

TEST_F(SchedulerReplicaTest, LosingTheLastCopyOfAShardFailsTheJob) {
  auto s = MakeRunning();
  LetServerDie(s.get(), 0);  // shard 0 now only on server 1
  ASSERT_EQ(s->state(), RUNNING);
  LetServerDie(s.get(), 1);
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_EQ(s->failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s->failure().message(),
              HasSubstr("server 1 held the only copy of shard 0 (its other copy was lost earlier)"));
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
