// The scheduler's side of changing the server count (scheduler_scaling.cc): an operator's request,
// the added server waiting outside the map, the cut-over at the first new checkpoint cut, a drained
// server leaving, and every refusal leaving the job as it was.
#include <functional>
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
  std::unique_ptr<Scheduler> MakeRunning(Mode mode = SYNC, bool checkpoints = true, int max_servers = 0,
                                         bool replicas = false) {
    JobSpec job;
    job.set_mode(mode);
    if (replicas) job.set_replicas(2);
    job.set_max_servers(max_servers);
    job.set_num_servers(2);
    job.set_num_workers(2);
    job.set_epochs(1);
    job.set_batch_size(10);
    job.set_lease_batches(1);  // ASYNC/SSP leases of one batch
    if (checkpoints) {
      job.set_checkpoint_dir("ckpt");
      job.set_checkpoint_every_steps(10);
    }
    Scheduler::Options options = TinyJobOptions(job, 30, 50, 40, 5, [this] { return now_; });
    options.persist = [this](int64_t version, const SchedulerState& state) {
      if (version > saved_version_) {
        saved_version_ = version;
        saved_ = state;
      }
      return absl::OkStatus();
    };
    options_ = options;
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
  static ScaleRequest Cancel() {
    ScaleRequest r;
    r.set_cancel(true);
    return r;
  }
  static absl::Status Report(Scheduler* s, int rank, std::vector<int64_t> steps) {
    CheckpointReport r;
    r.set_server_rank(rank);
    for (int64_t step : steps) r.add_steps(step);
    return s->ReportCheckpoints(r);
  }
  // Both servers hold the cut of step 10, an operator asks for 1 server, and both report the cut
  // of step 20: the change cuts over there.
  static void ShrinkToOneAtStepTwenty(Scheduler* s) {
    ASSERT_TRUE(Report(s, 0, {10}).ok());
    ASSERT_TRUE(Report(s, 1, {10}).ok());
    ASSERT_TRUE(s->Scale(To(1)).ok());
    ASSERT_TRUE(Report(s, 0, {10, 20}).ok());
    ASSERT_TRUE(Report(s, 1, {10, 20}).ok());
  }

  // A scheduler killed now and started again from the newest state it persisted.
  std::unique_ptr<Scheduler> Restarted() {
    Scheduler::Options options = options_;
    options.record_server_count = [this](int64_t step, int servers) {
      recorded_.push_back({step, servers});
      return absl::OkStatus();
    };
    saved_version_ = 0;  // the new process numbers its saves afresh
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Restore(std::move(options), saved_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // The job shrinks to 1 server and cuts over at step 20; server 0 restores the cut, saying so in
  // its heartbeats as `restoring` marks them, while a worker's push reached a server that serves,
  // which waits for the other worker's. No worker is evicted for that while server 0 restores;
  // once it serves the new epoch, the wait counts from then: dead_after (3 s) later the worker is.
  void ExpectHoldUpsCountFromWhenServerZeroServes(
      const std::function<void(int64_t restore_epoch, HeartbeatRequest* beat)>& restoring) {
    std::unique_ptr<Scheduler> s = MakeRunning();
    ASSERT_NO_FATAL_FAILURE(ShrinkToOneAtStepTwenty(s.get()));
    const int64_t restore_epoch = s->View().restore_epoch();
    auto beat = [&](bool restores) {
      now_ += absl::Seconds(1);
      HeartbeatRequest server = Hb(SERVER, 0);
      if (restores) {
        restoring(restore_epoch, &server);
      } else {
        server.set_store_epoch(restore_epoch);
      }
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
    for (int i = 0; i < 6; ++i) beat(/*restores=*/true);
    EXPECT_EQ(s->View().workers_size(), 2);
    for (int i = 0; i < 2; ++i) beat(/*restores=*/false);
    EXPECT_EQ(s->View().workers_size(), 2);
    for (int i = 0; i < 2; ++i) beat(/*restores=*/false);
    EXPECT_EQ(s->View().workers_size(), 1);
    EXPECT_EQ(s->state(), RUNNING);
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::vector<std::pair<int64_t, int>> recorded_;
  Scheduler::Options options_;
  SchedulerState saved_;
  int64_t saved_version_ = 0;
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

TEST_F(SchedulerScalingTest, WithReplicasEveryShardAndItsCopyArePlacedAfreshAndADeathCancelsAPendingChange) {
  std::unique_ptr<Scheduler> s = MakeRunning(SYNC, true, 0, /*replicas=*/true);
  // Each shard's copy lives on another server: at least 2.
  absl::StatusOr<ScaleResponse> one = s->Scale(To(1));
  EXPECT_EQ(one.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(one.status().message(), HasSubstr("scale to 1 servers: the job keeps replicas (--replicas=2), whose "
                                                "copy of a shard lives on another server; expected at least 2"));
  ASSERT_TRUE(s->Scale(To(3)).ok());
  // The added server is admitted (a restarted server would not be: ranks are not refilled).
  absl::StatusOr<RegisterResponse> added = s->Register(Reg("h:2"));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->rank(), 2);
  EXPECT_TRUE(s->Heartbeat(Hb(SERVER, 2)).ok());
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  ClusterView view = s->View();
  ASSERT_EQ(view.shard_map().num_servers(), 3);
  ASSERT_EQ(view.shard_hosts_size(), 3);
  for (int shard = 0; shard < 3; ++shard) {
    EXPECT_EQ(view.shard_hosts(shard).shard(), shard);
    EXPECT_EQ(view.shard_hosts(shard).primary(), shard);
    EXPECT_EQ(view.shard_hosts(shard).backup(), (shard + 1) % 3);
  }

  // A server dies while the next change waits for its added server: a shard lost a copy, so the
  // change is cancelled and the job stays at 3 servers.
  ASSERT_TRUE(s->Scale(To(4)).ok());
  for (int i = 0; i < 4; ++i) {
    now_ += absl::Seconds(1);
    for (int rank : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(SERVER, rank)).ok());
    for (int rank : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(WORKER, rank)).ok());
    s->CheckHealth();
  }
  view = s->View();
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_EQ(view.shard_map().num_servers(), 3);
  EXPECT_EQ(view.shard_hosts(2).primary(), 0);  // shard 2's copy on server 0, promoted
  absl::StatusOr<ScaleResponse> degraded = s->Scale(To(4));
  EXPECT_EQ(degraded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(degraded.status().message(), HasSubstr("a shard has lost its copy (shard 0 on server 0, copy on 1; "
                                                     "shard 1 on server 1, no copy; shard 2 on server 0, no copy)"));
  EXPECT_EQ(s->Scale(Cancel()).status().code(), absl::StatusCode::kFailedPrecondition);  // nothing pending
}

TEST_F(SchedulerScalingTest, EachServerOfTheNewMapReportsItsReCutOnceAndTheSummarySumsThem) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_TRUE(s->Scale(To(3)).ok());
  ASSERT_TRUE(s->Register(Reg("h:2")).ok());
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  ASSERT_EQ(s->View().shard_map().version(), 2);
  auto beat = [&](int rank, int64_t version, int64_t pause_ms, int64_t rows, int64_t rows_moved) {
    HeartbeatRequest hb = Hb(SERVER, rank);
    ReshardReport* r = hb.mutable_resharded();
    r->set_shard_map_version(version);
    r->set_pause_ms(pause_ms);
    r->set_rows(rows);
    r->set_rows_moved(rows_moved);
    r->set_bytes(rows * 100);
    r->set_bytes_moved(rows_moved * 100);
    return s->Heartbeat(hb).status();
  };
  ASSERT_TRUE(beat(0, 2, 120, 600, 0).ok());
  ASSERT_TRUE(beat(1, 2, 300, 700, 0).ok());
  ASSERT_TRUE(beat(2, 2, 80, 650, 650).ok());
  // Again (every heartbeat carries it), or for a map no change made: nothing more is counted.
  ASSERT_TRUE(beat(2, 2, 999, 650, 650).ok());
  ASSERT_TRUE(beat(0, 1, 999, 1, 1).ok());
  // A report that cannot be true is refused, naming it.
  absl::Status bad = beat(1, 2, 10, 5, 6);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("6 of 5 rows and 600 of 500 bytes moved): expected counts >= 0, and no "
                                       "more moved than held"));
  const std::string summary = s->SummaryJson();
  EXPECT_THAT(summary, HasSubstr("\"servers_reported\":3,\"max_pause_ms\":300,\"rows\":1950,\"rows_moved\":650,"
                                 "\"bytes\":195000,\"bytes_moved\":65000}"));
  // The reports are in the saved state: a restarted scheduler still has them.
  std::unique_ptr<Scheduler> restarted = Restarted();
  ASSERT_NE(restarted, nullptr);
  EXPECT_THAT(restarted->SummaryJson(), HasSubstr("\"servers_reported\":3,\"max_pause_ms\":300,"));
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
  // It learns when no server needs its checkpoints any more: once server 0 serves the cut, and
  // has a cut of its own after it (a recovery before that goes back to the change's cut).
  absl::StatusOr<HeartbeatResponse> answer = s->Heartbeat(Hb(SERVER, 1));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->map_restored_epoch(), 0);
  HeartbeatRequest restoring = Hb(SERVER, 0);
  restoring.set_restoring(true);
  ASSERT_TRUE(s->Heartbeat(restoring).ok());
  EXPECT_EQ(s->Heartbeat(Hb(SERVER, 1))->map_restored_epoch(), 0);
  HeartbeatRequest serving = Hb(SERVER, 0);
  serving.set_store_epoch(view.restore_epoch());
  ASSERT_TRUE(s->Heartbeat(serving).ok());
  EXPECT_EQ(s->Heartbeat(Hb(SERVER, 1))->map_restored_epoch(), 0) << "no cut of one server yet";
  ASSERT_TRUE(Report(s.get(), 0, {20, 30}).ok());
  EXPECT_EQ(s->Heartbeat(Hb(SERVER, 1))->map_restored_epoch(), view.restore_epoch());
  EXPECT_EQ(s->Heartbeat(Hb(SERVER, 0))->map_restored_epoch(), 0) << "only for servers outside the map";
  LeaveRequest leave;
  leave.set_role(SERVER);
  leave.set_rank(1);
  leave.set_reason("drained");
  ASSERT_TRUE(s->Leave(leave).ok());
  view = s->View();
  EXPECT_EQ(view.servers_size(), 1);
  EXPECT_EQ(s->state(), RUNNING);
  // The job's last server may not leave: its shard would have nowhere to go.
  leave.set_rank(0);
  const absl::Status last = s->Leave(leave);
  EXPECT_EQ(last.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(last.message(), HasSubstr("the job's last server"));
  EXPECT_EQ(s->View().shard_map().num_servers(), 1);
}

// A server of the map that is stopped (pstrain-server --drain_on_stop) asks to leave: the
// scheduler plans the scale-down that drains it, as pstrain-ctl scale would, and the server leaves
// once the cut-over has dropped it. Only the highest rank may (a scale-down drains the highest),
// asking again changes nothing, and a job that cannot change its count refuses and stays as it is.
TEST_F(SchedulerScalingTest, AStoppedServerOfTheMapAsksToBeDrainedAndLeavesAfterTheCutOver) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  LeaveRequest leave;
  leave.set_role(SERVER);
  leave.set_rank(0);
  leave.set_reason("stopped by a signal");
  absl::Status refused = s->Leave(leave);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("expected server 1"));
  EXPECT_EQ(s->Scale(Cancel()).status().code(), absl::StatusCode::kFailedPrecondition) << "nothing is pending";

  leave.set_rank(1);
  ASSERT_TRUE(s->Leave(leave).ok());
  ASSERT_TRUE(s->Leave(leave).ok()) << "asking again while its drain is pending";
  EXPECT_EQ(s->Scale(To(1)).status().code(), absl::StatusCode::kFailedPrecondition) << "one change at a time";
  EXPECT_EQ(s->View().servers_size(), 2) << "it serves until the cut-over";
  ASSERT_TRUE(Report(s.get(), 0, {10, 20}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10, 20}).ok());
  ClusterView view = s->View();
  EXPECT_EQ(view.shard_map().num_servers(), 1);
  EXPECT_EQ(view.restore_step(), 20);
  ASSERT_TRUE(s->Leave(leave).ok());  // now outside the map: it leaves
  EXPECT_EQ(s->View().servers_size(), 1);
  EXPECT_EQ(s->state(), RUNNING);

  std::unique_ptr<Scheduler> replicated = MakeRunning(ASYNC, /*checkpoints=*/true, 0, /*replicas=*/true);
  refused = replicated->Leave(leave);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("with replicas does not change its server count yet"));
  EXPECT_EQ(replicated->View().servers_size(), 2);
  EXPECT_EQ(replicated->state(), RUNNING);
}

TEST_F(SchedulerScalingTest, ADrainedServerStaysForARecoveryBeforeTheNewMapsFirstCutAndTakesNoPlaceFromIt) {
  // Servers with folders of their own: the drained server holds the only copy of its part of the
  // change's cut, which a recovery before the new map's first cut goes back to.
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_NO_FATAL_FAILURE(ShrinkToOneAtStepTwenty(s.get()));
  const ClusterView view = s->View();
  ASSERT_EQ(view.shard_map().num_servers(), 1);
  // Server 0, the map's only one, dies before its first cut on one server.
  for (int i = 0; i < 5; ++i) {
    now_ += absl::Seconds(1);
    EXPECT_EQ(s->Heartbeat(Hb(SERVER, 1))->map_restored_epoch(), 0);
    for (int worker : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(WORKER, worker)).ok());
    s->CheckHealth();
  }
  ASSERT_EQ(s->state(), RUNNING);
  // Its replacement takes rank 0 though the drained server 1 is still live, and goes back to the
  // change's cut, re-cut from both old servers' files.
  absl::StatusOr<RegisterResponse> replacement = s->Register(Reg("h:7"));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->rank(), 0);
  EXPECT_EQ(s->View().restore_step(), 20);
  EXPECT_EQ(s->View().restore_servers(), 2);
  HeartbeatRequest serving = Hb(SERVER, 0);
  serving.set_store_epoch(s->View().membership_epoch());
  ASSERT_TRUE(s->Heartbeat(serving).ok());
  EXPECT_EQ(s->Heartbeat(Hb(SERVER, 1))->map_restored_epoch(), 0) << "still no cut of one server";
  ASSERT_TRUE(Report(s.get(), 0, {20, 30}).ok());
  EXPECT_GE(s->Heartbeat(Hb(SERVER, 1))->map_restored_epoch(), view.restore_epoch());
}

TEST_F(SchedulerScalingTest, NoWorkerIsEvictedForHoldingOthersUpWhileAServerRestoresTheCut) {
  // Its store serves the old epoch until it has restored.
  ExpectHoldUpsCountFromWhenServerZeroServes(
      [](int64_t restore_epoch, HeartbeatRequest* beat) { beat->set_store_epoch(restore_epoch - 1); });
}

TEST_F(SchedulerScalingTest, NoWorkerIsEvictedWhileAServerSaysItHasNoStoreYet) {
  // A server heartbeats from the moment the job runs; until its store serves it says `restoring`
  // (it is building or restoring its shards), which holds the hold-up count like an old epoch.
  ExpectHoldUpsCountFromWhenServerZeroServes([](int64_t, HeartbeatRequest* beat) { beat->set_restoring(true); });
}

TEST_F(SchedulerScalingTest, AnAddedServerKilledWhileItWaitsIsDroppedAfterDeadAfterAndAnotherTakesItsRank) {
  // The added server heartbeats while it waits outside the map (restoring: no store yet). Killed
  // there, it is found dead after dead_after (3 s), not after the startup timeout, and the change
  // waits for another server to take its rank.
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  ASSERT_TRUE(s->Scale(To(3)).ok());
  absl::StatusOr<RegisterResponse> added = s->Register(Reg("h:2"));
  ASSERT_TRUE(added.ok()) << added.status();
  ASSERT_EQ(added->rank(), 2);
  auto tick = [&](bool added_beats) {
    now_ += absl::Seconds(1);
    for (int rank : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(SERVER, rank)).ok());
    if (added_beats) {
      HeartbeatRequest waiting = Hb(SERVER, 2);
      waiting.set_restoring(true);
      EXPECT_TRUE(s->Heartbeat(waiting).ok());
    }
    for (int worker : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(WORKER, worker)).ok());
    s->CheckHealth();
  };
  for (int i = 0; i < 3; ++i) tick(/*added_beats=*/true);
  EXPECT_EQ(s->View().servers_size(), 3);
  for (int i = 0; i < 5; ++i) tick(/*added_beats=*/false);  // SIGKILL
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_EQ(s->View().servers_size(), 2);
  EXPECT_EQ(s->View().shard_map().num_servers(), 2);
  EXPECT_THAT(s->Scale(To(4)).status().message(), HasSubstr("the change 2 -> 3 servers is still pending"));
  // Its replacement takes rank 2, and the change cuts over at the next cut.
  absl::StatusOr<RegisterResponse> again = s->Register(Reg("h:3"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rank(), 2);
  ASSERT_TRUE(Report(s.get(), 0, {10, 20}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10, 20}).ok());
  EXPECT_EQ(s->View().shard_map().num_servers(), 3);
  EXPECT_EQ(s->View().restore_step(), 20);
}

TEST_F(SchedulerScalingTest, ACutOverStepStaysTheOldestKeptUntilTheNewMapHasANewerCut) {
  // CheckpointAck.keep_from_step: the servers of the old map go on training (and checkpointing)
  // until they learn of the cut-over; the cut it chose must outlive their keep rule.
  std::unique_ptr<Scheduler> s = MakeRunning();
  EXPECT_EQ(s->CheckpointsKeptFrom(), 0) << "no cut yet: every file stays";
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  EXPECT_EQ(s->CheckpointsKeptFrom(), 10);
  ASSERT_TRUE(s->Scale(To(1)).ok());
  ASSERT_TRUE(Report(s.get(), 0, {10, 20}).ok());
  EXPECT_EQ(s->CheckpointsKeptFrom(), 10) << "20 is not common yet";
  ASSERT_TRUE(Report(s.get(), 1, {10, 20}).ok());
  const int64_t restore_epoch = s->View().restore_epoch();
  ASSERT_EQ(s->View().restore_step(), 20);
  EXPECT_EQ(s->CheckpointsKeptFrom(), 20);
  auto serving = [&](int64_t epoch) {
    HeartbeatRequest beat = Hb(SERVER, 0);
    beat.set_store_epoch(epoch);
    EXPECT_TRUE(s->Heartbeat(beat).ok());
  };
  // Server 0 has not learnt of the cut-over: its next cuts are of the abandoned run.
  serving(restore_epoch - 1);
  ASSERT_TRUE(Report(s.get(), 0, {10, 20, 30, 40}).ok());
  EXPECT_EQ(s->CheckpointsKeptFrom(), 20);
  // Restored and serving the new map, it cuts 30 afresh: that is the newest cut now.
  serving(restore_epoch);
  ASSERT_TRUE(Report(s.get(), 0, {20, 30}).ok());
  EXPECT_EQ(s->CheckpointsKeptFrom(), 30);
}

TEST_F(SchedulerScalingTest, AnAsyncChangeHoldsFreshLeasesAndCutsOverAtTheQuietCutEveryServerWrites) {
  // 50 samples in leases of one batch of 10 ([0, 10), [10, 20), ...), 2 servers, 2 workers.
  std::unique_ptr<Scheduler> s = MakeRunning(ASYNC);
  auto lease_for = [&](int rank) { return test_util::LeaseFor(s.get(), rank); };
  auto trained = [&](int rank, int64_t lease_id) {
    ProgressReport r;
    r.set_worker_rank(rank);
    r.mutable_train()->set_samples(10);
    r.mutable_train()->set_steps(1);
    LeaseProgress* p = r.add_leases();
    p->set_lease_id(lease_id);
    p->set_batches_done(1);
    EXPECT_TRUE(s->ReportProgress(r).ok());
    return r;
  };
  // What server `rank` answers a heartbeat saying its store is at `step` (and confirming `report`).
  auto beat = [&](int rank, int64_t step, const ProgressReport* report = nullptr) {
    HeartbeatRequest hb = report != nullptr ? test_util::ConfirmedBy(rank, *report) : Hb(SERVER, rank);
    hb.set_step(step);
    hb.set_store_epoch(s->View().membership_epoch());
    absl::StatusOr<HeartbeatResponse> answer = s->Heartbeat(hb);
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.value_or(HeartbeatResponse());
  };
  ASSERT_TRUE(Report(s.get(), 0, {4}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {4}).ok());
  const LeaseResponse first = lease_for(0);
  ASSERT_EQ(first.lease_id(), 1);

  absl::StatusOr<ScaleResponse> plan = s->Scale(To(3));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(lease_for(1).lease_id(), 2) << "not ready yet: leases go out as before";
  ASSERT_TRUE(s->Register(Reg("h:2")).ok());
  // Ready: no fresh lease until the cut-over, though positions [20, 50) are not leased yet.
  const LeaseResponse held = lease_for(1);
  EXPECT_TRUE(held.wait());
  EXPECT_EQ(held.lease_id(), 0);
  EXPECT_EQ(beat(0, 5).checkpoint_at_step(), 0) << "leases 1 and 2 are not complete";

  const ProgressReport one = trained(0, 1);
  const ProgressReport two = trained(1, 2);
  for (int rank : {0, 1}) beat(rank, rank == 0 ? 6 : 5, &one);
  EXPECT_EQ(beat(0, 6, &two).checkpoint_at_step(), 0) << "lease 2 is not complete on server 1";
  // Server 1's confirmation completes the last lease: both are asked for one step beyond every
  // step and checkpoint either has (6 and 7 now), the added server is not.
  EXPECT_EQ(beat(1, 7, &two).checkpoint_at_step(), 8);
  EXPECT_EQ(beat(0, 7).checkpoint_at_step(), 8);
  HeartbeatRequest no_store = Hb(SERVER, 0);
  no_store.set_restoring(true);
  EXPECT_EQ(s->Heartbeat(no_store)->checkpoint_at_step(), 0) << "asked only of a store that serves the map";
  beat(0, 7);
  {
    // A scheduler restarted now goes on with the quiet cut it asked for (saved with the change),
    // and holds fresh leases back as before.
    std::unique_ptr<Scheduler> restarted = Restarted();
    ASSERT_NE(restarted, nullptr);
    HeartbeatRequest hb = Hb(SERVER, 1);
    hb.set_step(7);
    absl::StatusOr<HeartbeatResponse> answer = restarted->Heartbeat(hb);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->checkpoint_at_step(), 8);
    LeaseRequest r;
    r.set_worker_rank(0);
    absl::StatusOr<LeaseResponse> lease = restarted->LeaseWork(r);
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_TRUE(lease->wait());
  }
  HeartbeatRequest waiting = Hb(SERVER, 2);
  waiting.set_restoring(true);
  absl::StatusOr<HeartbeatResponse> outside = s->Heartbeat(waiting);
  ASSERT_TRUE(outside.ok()) << outside.status();
  EXPECT_EQ(outside->checkpoint_at_step(), 0);
  EXPECT_TRUE(lease_for(0).wait());

  // An ordinary checkpoint of both at another step is no cut-over: only the quiet cut is.
  ASSERT_TRUE(Report(s.get(), 0, {4, 7}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {4, 7}).ok());
  EXPECT_EQ(s->View().shard_map().num_servers(), 2);
  ASSERT_TRUE(Report(s.get(), 0, {4, 7, 8}).ok());
  EXPECT_EQ(s->View().shard_map().num_servers(), 2) << "server 1 has not written it yet";
  ASSERT_TRUE(Report(s.get(), 1, {4, 7, 8}).ok());
  const ClusterView view = s->View();
  EXPECT_EQ(view.shard_map().num_servers(), 3);
  EXPECT_EQ(view.restore_step(), 8);
  EXPECT_EQ(view.restore_servers(), 2);
  EXPECT_EQ(recorded_, (std::vector<std::pair<int64_t, int>>{{8, 3}}));
  EXPECT_EQ(beat(0, 8).checkpoint_at_step(), 0) << "nothing pending any more";
  beat(1, 8);
  // Not before every server of the new map serves it: one of the old map that had not learnt of
  // the cut-over would apply the lease to the store it is about to retire.
  EXPECT_TRUE(lease_for(0).wait()) << "server 2 does not serve the new map yet";
  ASSERT_TRUE(s->Scale(To(4)).ok());
  EXPECT_TRUE(lease_for(0).wait()) << "a change asked for meanwhile, not ready yet, lifts no hold";
  ASSERT_TRUE(s->Scale(Cancel()).ok());

  // Leases go out again, and the new server's confirmations count: a lease completes once all
  // three servers applied it.
  beat(2, 8);
  const LeaseResponse third = lease_for(0);
  ASSERT_EQ(third.lease_id(), 3);
  EXPECT_EQ(third.begin(), 20);
  const ProgressReport three = trained(0, 3);
  for (int rank : {0, 1}) beat(rank, 9, &three);
  EXPECT_EQ(s->CheckpointsKeptFrom(), 8) << "no rank has a checkpoint of its own under 3 servers yet";
  EXPECT_EQ(s->View().servers_size(), 3);
  EXPECT_EQ(beat(2, 9, &three).leases_settled_below(), 4) << "complete on all three, and reported";

  // Server 2 dies before its first checkpoint: its replacement restores the quiet cut re-cut (the
  // view keeps its restore step), while server 0 would restore its own newer file.
  ASSERT_TRUE(Report(s.get(), 0, {7, 8, 12}).ok());
  for (int i = 0; i < 5; ++i) {
    now_ += absl::Seconds(1);
    for (int rank : {0, 1}) beat(rank, 12);
    for (int worker : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(WORKER, worker)).ok());
    s->CheckHealth();
  }
  EXPECT_EQ(s->View().servers_size(), 2);
  absl::StatusOr<RegisterResponse> replacement = s->Register(Reg("h:5"));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->rank(), 2);
  EXPECT_EQ(replacement->restore_own_step(), 8);
  EXPECT_EQ(s->View().restore_step(), 8);
  EXPECT_EQ(s->View().restore_servers(), 2);
  ASSERT_TRUE(Report(s.get(), 1, {7, 8, 13}).ok());
  ASSERT_TRUE(Report(s.get(), 2, {14}).ok());
  EXPECT_EQ(s->CheckpointsKeptFrom(), -1) << "every rank has a checkpoint of its own under 3 servers";
  EXPECT_EQ(s->state(), RUNNING);
}

TEST_F(SchedulerScalingTest, AnAsyncChangeWhoseQuietCutDoesNotComeIsCancelledAndTrainingGoesOn) {
  // A lease out never completes (its holder heartbeats but pushes nothing more): the hold on fresh
  // leases must not stop the job for good. server_recovery_timeout after the change became ready,
  // the scheduler cancels it, and leases go out again.
  std::unique_ptr<Scheduler> s = MakeRunning(ASYNC);
  auto lease_for = [&](int rank) { return test_util::LeaseFor(s.get(), rank); };
  ASSERT_EQ(lease_for(0).lease_id(), 1);
  ASSERT_TRUE(s->Scale(To(3)).ok());
  ASSERT_TRUE(s->Register(Reg("h:2")).ok());
  ASSERT_TRUE(lease_for(1).wait()) << "ready: fresh leases held";
  const absl::Duration timeout = options_.server_recovery_timeout;
  for (absl::Duration waited; waited <= timeout; waited += absl::Seconds(1)) {
    now_ += absl::Seconds(1);
    for (int rank : {0, 1, 2}) EXPECT_TRUE(s->Heartbeat(Hb(SERVER, rank)).ok());
    for (int worker : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(WORKER, worker)).ok());
    s->CheckHealth();
  }
  EXPECT_EQ(s->View().shard_map().num_servers(), 2);
  const LeaseResponse fresh = lease_for(1);
  EXPECT_FALSE(fresh.wait());
  EXPECT_EQ(fresh.lease_id(), 2);
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_EQ(s->Scale(Cancel()).status().code(), absl::StatusCode::kFailedPrecondition) << "nothing is pending";
}

TEST_F(SchedulerScalingTest, AsyncJobsSayNoOldestKeptStep) {
  std::unique_ptr<Scheduler> s = MakeRunning(ASYNC);
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  EXPECT_EQ(s->CheckpointsKeptFrom(), -1);
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

  std::unique_ptr<Scheduler> async_replicas = MakeRunning(SSP, /*checkpoints=*/true, 0, /*replicas=*/true);
  EXPECT_THAT(async_replicas->Scale(To(3)).status().message(), HasSubstr("ASYNC or SSP job with replicas"));
  EXPECT_EQ(async_replicas->View().shard_map().version(), 1);
  std::unique_ptr<Scheduler> no_checkpoints = MakeRunning(SYNC, /*checkpoints=*/false);
  EXPECT_THAT(no_checkpoints->Scale(To(3)).status().message(), HasSubstr("the job writes no checkpoints"));
  EXPECT_EQ(no_checkpoints->View().shard_map().version(), 1);
}

TEST_F(SchedulerScalingTest, ARestartedSchedulerGoesOnWithAPendingChangeAndKnowsACutOver) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  ASSERT_TRUE(s->Scale(To(3)).ok());
  ASSERT_TRUE(s->Register(Reg("h:2")).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 2)).ok());
  const int64_t epoch = s->View().membership_epoch();

  // Killed while the change is pending, with the added server waiting outside the map.
  s = Restarted();
  ASSERT_NE(s, nullptr);
  ClusterView view = s->View();
  EXPECT_EQ(view.shard_map().version(), 1);
  EXPECT_EQ(view.servers_size(), 3);
  EXPECT_EQ(view.membership_epoch(), epoch);
  absl::StatusOr<ScaleResponse> again = s->Scale(To(4));
  EXPECT_THAT(again.status().message(), HasSubstr("the change 2 -> 3 servers is still pending"));
  for (int rank : {0, 1, 2}) ASSERT_TRUE(s->Heartbeat(Hb(SERVER, rank)).ok());
  ASSERT_TRUE(Report(s.get(), 0, {10, 20}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10, 20}).ok());
  EXPECT_EQ(s->View().shard_map().version(), 2);
  EXPECT_THAT(recorded_, ::testing::ElementsAre(std::make_pair(int64_t{20}, 3)));

  // Killed right after the cut-over: the state it comes back with has the new map and the change.
  s = Restarted();
  ASSERT_NE(s, nullptr);
  view = s->View();
  EXPECT_EQ(view.shard_map().version(), 2);
  EXPECT_EQ(view.shard_map().num_servers(), 3);
  EXPECT_EQ(view.restore_step(), 20);
  const DashboardStatus status = s->DashboardStatus();
  ASSERT_EQ(status.server_count_changes.size(), 1u);
  EXPECT_EQ(status.server_count_changes[0].step, 20);
  EXPECT_EQ(status.server_count_changes[0].to, 3);
  EXPECT_TRUE(s->Scale(To(2)).ok()) << "no change is pending any more";
}

TEST_F(SchedulerScalingTest, AnOperatorCancelsAPendingChangeAndTheAddedServerIsDropped) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  EXPECT_THAT(s->Scale(Cancel()).status().message(),
              HasSubstr("cancel: no change of the server count is pending (the job has 2 servers)"));
  ASSERT_TRUE(s->Scale(To(3)).ok());
  ASSERT_TRUE(s->Register(Reg("h:2")).ok());
  const int64_t epoch = s->View().membership_epoch();
  absl::StatusOr<ScaleResponse> cancelled = s->Scale(Cancel());
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->plan(), "cancelled 2 -> 3 servers; the job stays at 2 servers");
  const ClusterView view = s->View();
  EXPECT_EQ(view.servers_size(), 2);  // the added server learns from the view that it is not needed
  EXPECT_EQ(view.membership_epoch(), epoch);
  EXPECT_EQ(view.shard_map().version(), 1);
  // Its rank is not open any more, and a new change may be asked for.
  EXPECT_FALSE(s->Register(Reg("h:3")).ok());
  EXPECT_TRUE(s->Scale(To(3)).ok());
}

TEST_F(SchedulerScalingTest, AScaleUpWhoseServersDoNotRegisterInTimeIsCancelled) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  ASSERT_TRUE(s->Scale(To(4)).ok());
  ASSERT_TRUE(s->Register(Reg("h:2")).ok());  // rank 3 never comes
  auto tick = [&](absl::Duration by) {
    now_ += by;
    for (int rank : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(SERVER, rank)).ok());
    for (int worker : {0, 1}) EXPECT_TRUE(s->Heartbeat(Hb(WORKER, worker)).ok());
    s->CheckHealth();
  };
  // server_recovery_timeout is 60 s.
  for (int i = 0; i < 59; ++i) tick(absl::Seconds(1));
  EXPECT_THAT(s->Scale(To(3)).status().message(), HasSubstr("the change 2 -> 4 servers is still pending"));
  tick(absl::Seconds(2));
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_EQ(s->View().servers_size(), 2);
  EXPECT_TRUE(s->DashboardStatus().server_count_changes.empty());
  EXPECT_TRUE(s->Scale(To(3)).ok());
}

TEST_F(SchedulerScalingTest, AServerRegisteringWithAFullJobGrowsItUpToMaxServers) {
  std::unique_ptr<Scheduler> s = MakeRunning(SYNC, true, /*max_servers=*/3);
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  absl::StatusOr<RegisterResponse> added = s->Register(Reg("h:2"));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->rank(), 2);
  // Its retry is the same member, not a second growth.
  absl::StatusOr<RegisterResponse> retried = s->Register(Reg("h:2"));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->rank(), 2);
  EXPECT_EQ(s->View().shard_map().version(), 1);
  ASSERT_TRUE(Report(s.get(), 0, {10, 20}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10, 20}).ok());
  const ClusterView view = s->View();
  EXPECT_EQ(view.shard_map().version(), 2);
  EXPECT_EQ(view.shard_map().num_servers(), 3);
  EXPECT_THAT(recorded_, ::testing::ElementsAre(std::make_pair(int64_t{20}, 3)));
  // At max_servers the next one is refused; the job is unchanged.
  absl::StatusOr<RegisterResponse> fourth = s->Register(Reg("h:3"));
  EXPECT_FALSE(fourth.ok());
  EXPECT_THAT(fourth.status().message(), HasSubstr("job already has 3 servers"));
  EXPECT_EQ(s->View().servers_size(), 3);
  EXPECT_TRUE(s->DashboardStatus().server_count_changes.size() == 1);
}

TEST_F(SchedulerScalingTest, AServerRegisteringBeforeADrainedOneLeftIsRefusedAndAsksForNothing) {
  std::unique_ptr<Scheduler> s = MakeRunning(SYNC, true, /*max_servers=*/3);
  ASSERT_TRUE(s->Scale(To(1)).ok());
  ASSERT_TRUE(Report(s.get(), 0, {10}).ok());
  ASSERT_TRUE(Report(s.get(), 1, {10}).ok());
  ASSERT_EQ(s->View().shard_map().num_servers(), 1);  // server 1 is drained and still live
  absl::StatusOr<RegisterResponse> early = s->Register(Reg("h:9"));
  EXPECT_FALSE(early.ok());
  EXPECT_EQ(s->DashboardStatus().server_count_changes.size(), 1u) << "no change was asked for";
  EXPECT_TRUE(s->Scale(To(2)).ok());
}

TEST_F(SchedulerScalingTest, WithoutMaxServersAServerRegisteringWithAFullJobIsRefused) {
  std::unique_ptr<Scheduler> s = MakeRunning();
  absl::StatusOr<RegisterResponse> extra = s->Register(Reg("h:2"));
  EXPECT_FALSE(extra.ok());
  EXPECT_THAT(extra.status().message(), HasSubstr("job already has 2 servers"));
  EXPECT_TRUE(s->DashboardStatus().server_count_changes.empty());
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
