#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

using test_util::DoneReport;
using test_util::Hb;
using test_util::Reg;
using test_util::TinyJobOptions;

// A scheduler for a 1-server, 2-worker job on a clock the test moves by hand.
class SchedulerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Scheduler> Make(Mode mode = SYNC, int workers = 2, int min_workers = 1, int servers = 1,
                                  int64_t checkpoint_every = 0) {
    JobSpec job;
    job.set_num_servers(servers);
    if (checkpoint_every > 0) {
      job.set_checkpoint_dir("ckpt");
      job.set_checkpoint_every_steps(checkpoint_every);
    }
    job.set_num_workers(workers);
    job.set_min_workers(min_workers);
    job.set_epochs(1);
    job.set_mode(mode);
    job.set_batch_size(10);
    job.set_lease_batches(2);
    // 2 workers: evaluation leases of 5 test samples.
    Scheduler::Options options = TinyJobOptions(job, 8, 50, 40, 3, [this] { return now_; });
    options.startup_timeout = absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(options);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(s).value();
  }

  static ProgressReport Done(int rank) { return DoneReport(rank); }

  static LeaseRequest EvalRequest(int rank, int epoch) {
    LeaseRequest r;
    r.set_worker_rank(rank);
    r.set_epoch(epoch);
    r.set_eval(true);
    return r;
  }

  // A report of evaluation lease `lease` with 4 of 5 right and a loss of 0.2 per sample.
  static ProgressReport EvalResult(int rank, const LeaseResponse& lease) {
    ProgressReport r;
    r.set_worker_rank(rank);
    r.set_step(3);  // Evaluating after the last step (TrainEpoch0).
    EvalStats* e = r.add_evals();
    e->set_lease_id(lease.lease_id());
    e->set_samples(lease.end() - lease.begin());
    e->set_correct(4 * (lease.end() - lease.begin()) / 5);
    e->set_loss_sum(0.2 * static_cast<double>(lease.end() - lease.begin()));
    return r;
  }

  // SYNC: workers `ranks` report the job's last step (3): epoch 0's training is over, so its
  // evaluation leases go out.
  static void TrainEpoch0(Scheduler* s, std::vector<int> ranks = {0, 1}) {
    for (int rank : ranks) {
      ProgressReport r;
      r.set_worker_rank(rank);
      r.set_step(3);
      ASSERT_TRUE(s->ReportProgress(r).ok());
    }
  }

  // Worker `rank` leases and reports evaluation leases of epoch 0 until the pool says wait or
  // epoch_done; returns how many it evaluated.
  static int EvaluateAll(Scheduler* s, int rank) {
    for (int n = 0;; ++n) {
      absl::StatusOr<LeaseResponse> lease = s->LeaseWork(EvalRequest(rank, 0));
      EXPECT_TRUE(lease.ok()) << lease.status();
      if (!lease.ok() || lease->epoch_done() || lease->wait()) return n;
      EXPECT_TRUE(s->ReportProgress(EvalResult(rank, *lease)).ok());
    }
  }

  // Registers the server and `workers` workers; the job runs.
  static void RegisterAll(Scheduler* s, int workers = 2) {
    ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
    for (int w = 0; w < workers; ++w) ASSERT_TRUE(s->Register(Reg(WORKER, absl::StrCat("h:", w + 2))).ok());
    ASSERT_EQ(s->state(), RUNNING);
  }

  // Server recovery: a SYNC job with 2 servers ("h:1", "h:2"), 2 workers ("h:3", "h:4") and
  // checkpoints every 10 steps, running, everyone heartbeated at now_.
  std::unique_ptr<Scheduler> MakeRecovering(Mode mode = SYNC) {
    auto s = Make(mode, 2, 1, /*servers=*/2, /*checkpoint_every=*/10);
    for (const char* address : {"h:1", "h:2"}) EXPECT_TRUE(s->Register(Reg(SERVER, address)).ok());
    for (const char* address : {"h:3", "h:4"}) EXPECT_TRUE(s->Register(Reg(WORKER, address)).ok());
    EXPECT_EQ(s->state(), RUNNING);
    for (Role role : {SERVER, WORKER}) {
      for (int rank : {0, 1}) {
        EXPECT_TRUE(s->Heartbeat(Hb(role, rank)).ok());
      }
    }
    return s;
  }

  // Moves the clock by 3.5 s with every live member but `silent_server` heartbeating halfway, and
  // runs the watchdog: that server is dead.
  void LetServerDie(Scheduler* s, int silent_server) {
    now_ += absl::Seconds(2);
    const ClusterView view = s->View();
    for (const ServerInfo& server : view.servers()) {
      if (server.rank() != silent_server) {
        EXPECT_TRUE(s->Heartbeat(Hb(SERVER, server.rank())).ok());
      }
    }
    for (const WorkerInfo& worker : view.workers()) {
      EXPECT_TRUE(s->Heartbeat(Hb(WORKER, worker.rank())).ok());
    }
    now_ += absl::Milliseconds(1500);
    s->CheckHealth();
  }

  static CheckpointReport Checkpoints(int server_rank, std::vector<int64_t> steps) {
    CheckpointReport r;
    r.set_server_rank(server_rank);
    for (int64_t step : steps) r.add_steps(step);
    return r;
  }

  static std::vector<int> ServerRanks(const ClusterView& view) {
    std::vector<int> ranks;
    for (const ServerInfo& s : view.servers()) ranks.push_back(s.rank());
    return ranks;
  }

  static std::vector<int> WorkerRanks(const ClusterView& view) {
    std::vector<int> ranks;
    for (const WorkerInfo& w : view.workers()) ranks.push_back(w.rank());
    return ranks;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST(SchedulerBuildTest, ARoleOfAnotherBuildIsRefusedAndChangesNothing) {
  JobSpec job;
  job.set_num_servers(1);
  job.set_num_workers(1);
  job.set_epochs(1);
  job.set_mode(SYNC);
  job.set_batch_size(10);
  Scheduler::Options options = TinyJobOptions(job, 8, 50, 40, 3, [] { return absl::FromUnixSeconds(1000); });
  options.build_fingerprint = 0xabc;
  absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(options);
  ASSERT_TRUE(s.ok()) << s.status();
  RegisterRequest other = Reg(SERVER, "127.0.0.1:7");
  other.set_build_fingerprint(0xdef);
  const absl::StatusOr<RegisterResponse> refused = (*s)->Register(other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr(
                  "register server at '127.0.0.1:7': its build fingerprint is def, this scheduler's abc; a role "
                  "of another build"));
  EXPECT_EQ((*s)->View().servers_size(), 0) << "the refusal changed the membership";
  // The same build, and a role that sends none (0), are welcome.
  RegisterRequest same = Reg(SERVER, "127.0.0.1:7");
  same.set_build_fingerprint(0xabc);
  EXPECT_TRUE((*s)->Register(same).ok());
  EXPECT_TRUE((*s)->Register(Reg(WORKER, "")).ok());
}

TEST_F(SchedulerTest, ViewWaitersAreReleasedWhenTheLastRoleRegisters) {
  auto s = Make();
  std::optional<absl::StatusOr<ClusterView>> got;
  s->WhenRunning([&](absl::StatusOr<ClusterView> v) { got = std::move(v); });
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  absl::StatusOr<RegisterResponse> w0 = s->Register(Reg(WORKER, "h:2"));
  ASSERT_TRUE(w0.ok());
  EXPECT_EQ(w0->rank(), 0);
  EXPECT_EQ(w0->job().num_workers(), 2);
  EXPECT_EQ(w0->dead_after_ms(), 3000);
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(s->state(), WAITING_FOR_ROLES);
  ASSERT_EQ(s->Register(Reg(WORKER, "h:3"))->rank(), 1);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->status();
  EXPECT_EQ((*got)->state(), RUNNING);
  EXPECT_EQ((*got)->workers_size(), 2);
  EXPECT_EQ((*got)->total_steps(), 3);
  EXPECT_EQ(s->state(), RUNNING);
}

TEST_F(SchedulerTest, ServerFailureAbortsParkedCallsAndIsReportedEverywhere) {
  auto s = Make();
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:2")).ok());
  std::optional<absl::StatusOr<ClusterView>> view;
  std::optional<absl::Status> barrier;
  s->WhenRunning([&](absl::StatusOr<ClusterView> v) { view = std::move(v); });
  BarrierRequest b;
  b.set_name("servers-ready");
  b.set_participants(BarrierRequest::ALL);
  b.set_role(WORKER);
  b.set_rank(0);
  s->Barrier(b, [&](absl::Status st) { barrier = st; });
  EXPECT_FALSE(view.has_value() || barrier.has_value());

  FailureReport f;
  f.set_role(SERVER);
  f.set_rank(0);
  f.set_message("out of memory");
  s->ReportFailure(f);
  ASSERT_TRUE(view.has_value() && barrier.has_value());
  EXPECT_EQ(view->status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(view->status().message(), "job failed: server 0 at h:1: out of memory");
  EXPECT_EQ(barrier->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s->state(), FAILED);

  HeartbeatRequest hb;
  hb.set_role(SERVER);
  absl::StatusOr<HeartbeatResponse> answer = s->Heartbeat(hb);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->state(), FAILED);
  EXPECT_EQ(answer->failure(), "server 0 at h:1: out of memory");
  EXPECT_EQ(s->View().state(), FAILED);
  EXPECT_EQ(s->Register(Reg(WORKER, "h:3")).status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(s->SummaryJson().find("out of memory"), std::string::npos);
}

TEST_F(SchedulerTest, BarrierForAllWaitsForServersToo) {
  auto s = Make(SYNC, 1);
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:2")).ok());
  int released = 0;
  BarrierRequest b;
  b.set_name("servers-ready");
  b.set_participants(BarrierRequest::ALL);
  b.set_role(WORKER);
  s->Barrier(b, [&](absl::Status st) { released += st.ok(); });
  EXPECT_EQ(released, 0);
  b.set_role(SERVER);
  s->Barrier(b, [&](absl::Status st) { released += st.ok(); });
  EXPECT_EQ(released, 2);

  std::optional<absl::Status> unknown;
  b.set_rank(5);
  s->Barrier(b, [&](absl::Status st) { unknown = st; });
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerTest, SilentWorkerIsRemovedAndTheJobGoesOn) {
  auto s = Make();
  RegisterAll(s.get());
  const int64_t epoch = s->View().membership_epoch();
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();
  EXPECT_EQ(s->state(), RUNNING);
  const ClusterView view = s->View();
  EXPECT_EQ(view.membership_epoch(), epoch + 1);
  EXPECT_EQ(WorkerRanks(view), std::vector<int>{0});
  // The removal happens once: the watchdog's next ticks change nothing.
  s->CheckHealth();
  s->CheckHealth();
  EXPECT_EQ(s->View().membership_epoch(), epoch + 1);
  // A worker declared dead while merely stalled learns it from its next heartbeat.
  absl::StatusOr<HeartbeatResponse> hb = s->Heartbeat(Hb(WORKER, 1));
  EXPECT_EQ(hb.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(hb.status().message().substr(0, 30), "worker 1 is no longer a member") << hb.status();
  const JobStatus status = s->Status();
  EXPECT_EQ(status.registered_workers(), 1);
  EXPECT_NE(s->SummaryJson().find("\"membership_events\": [{\"seconds\": 3.5, \"role\": \"worker\", "
                                  "\"rank\": 1, \"kind\": \"died\"}]"),
            std::string::npos)
      << s->SummaryJson();
}

TEST_F(SchedulerTest, FewerThanMinWorkersFailsTheJob) {
  auto s = Make(SYNC, 2, /*min_workers=*/2);
  RegisterAll(s.get());
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_EQ(s->failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s->failure().message(),
            "only 1 live worker left; the job needs at least 2 (--min_workers); "
            "worker 1 at h:3 sent no heartbeat for 3.5 s");
}

TEST_F(SchedulerTest, SilentServerStillFailsTheJob) {
  auto s = Make();
  RegisterAll(s.get());
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_EQ(s->failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s->failure().message(), "server 0 at h:1 sent no heartbeat for 3.5 s");
}

TEST_F(SchedulerTest, AsyncReplacementRestoresItsOwnNewestCheckpointAlone) {
  // ASYNC servers checkpoint at their own update counts: no common cut, no rollback of the others.
  auto s = MakeRecovering(ASYNC);
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(0, {40, 80})).ok());
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(1, {30, 60})).ok());
  const int64_t epoch = s->View().membership_epoch();
  LetServerDie(s.get(), 1);
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_EQ(s->View().membership_epoch(), epoch + 1);
  absl::StatusOr<RegisterResponse> replacement = s->Register(Reg(SERVER, "h:9"));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->rank(), 1);
  ASSERT_TRUE(replacement->has_restore_own_step());
  EXPECT_EQ(replacement->restore_own_step(), 60);
  const ClusterView view = s->View();
  EXPECT_EQ(view.membership_epoch(), epoch + 2);
  EXPECT_FALSE(view.has_restore_step());  // Nobody else goes back; workers do not rewind.
  // A retried registration gets the same answer.
  absl::StatusOr<RegisterResponse> again = s->Register(Reg(SERVER, "h:9"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->restore_own_step(), 60);
}

TEST_F(SchedulerTest, DeadServerFailsTheJobWithoutCheckpoints) {
  // SYNC without checkpoints.
  auto t = Make(SYNC, 2, 1, /*servers=*/2);
  for (const char* address : {"h:1", "h:2"}) ASSERT_TRUE(t->Register(Reg(SERVER, address)).ok());
  for (const char* address : {"h:3", "h:4"}) ASSERT_TRUE(t->Register(Reg(WORKER, address)).ok());
  for (int rank : {0, 1}) ASSERT_TRUE(t->Heartbeat(Hb(SERVER, rank)).ok());
  LetServerDie(t.get(), 0);
  EXPECT_EQ(t->state(), FAILED);
  EXPECT_EQ(t->failure().message(), "server 0 at h:1 sent no heartbeat for 3.5 s");
}

TEST_F(SchedulerTest, DeadServerIsReplacedAndTheViewNamesTheNewestCommonCheckpoint) {
  auto s = MakeRecovering();
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(0, {10, 20})).ok());
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(1, {10})).ok());
  const int64_t epoch = s->View().membership_epoch();
  EXPECT_FALSE(s->View().has_restore_step());

  LetServerDie(s.get(), 1);
  EXPECT_EQ(s->state(), RUNNING);
  ClusterView view = s->View();
  EXPECT_EQ(view.membership_epoch(), epoch + 1);
  EXPECT_EQ(ServerRanks(view), std::vector<int>{0});  // The vacancy shows as a missing rank.
  EXPECT_EQ(WorkerRanks(view), (std::vector<int>{0, 1}));
  EXPECT_EQ(view.shard_map().chunks_size(), 2);  // Still two shards.
  EXPECT_FALSE(view.has_restore_step());
  EXPECT_EQ(s->Status().registered_servers(), 1);
  // The dead server learns it; its checkpoint reports are refused.
  EXPECT_EQ(s->Heartbeat(Hb(SERVER, 1)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->ReportCheckpoints(Checkpoints(1, {10, 20})).code(), absl::StatusCode::kFailedPrecondition);
  // The watchdog's next ticks change nothing.
  s->CheckHealth();
  EXPECT_EQ(s->View().membership_epoch(), epoch + 1);

  // A worker cannot take a server's rank; a server registering now replaces the dead one.
  now_ += absl::Seconds(5);
  absl::StatusOr<RegisterResponse> replacement = s->Register(Reg(SERVER, "h:9"));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->rank(), 1);
  view = s->View();
  EXPECT_EQ(view.state(), RUNNING);
  EXPECT_EQ(view.membership_epoch(), epoch + 2);
  ASSERT_EQ(ServerRanks(view), (std::vector<int>{0, 1}));
  EXPECT_EQ(view.servers(1).address(), "h:9");
  ASSERT_TRUE(view.has_restore_step());
  EXPECT_EQ(view.restore_step(), 10);  // Server 0 has {10, 20}, server 1 only {10}.
  EXPECT_EQ(view.restore_epoch(), epoch + 2);
  // A retried registration is the same member; no second server fits. With recovery on, a server
  // finding no free rank is told to retry (UNAVAILABLE): it may be a replacement started before the
  // death it replaces was detected.
  EXPECT_EQ(s->Register(Reg(SERVER, "h:9"))->rank(), 1);
  EXPECT_EQ(s->View().membership_epoch(), epoch + 2);
  absl::Status extra = s->Register(Reg(SERVER, "h:10")).status();
  EXPECT_EQ(extra.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(extra.message()), ::testing::HasSubstr("dead server's rank is free"));
  // restore_step stays with later membership changes, e.g. a worker leaving.
  LeaveRequest leave;
  leave.set_role(WORKER);
  leave.set_rank(1);
  ASSERT_TRUE(s->Leave(leave).ok());
  EXPECT_EQ(s->View().restore_step(), 10);
  EXPECT_EQ(s->View().restore_epoch(), epoch + 2);
  EXPECT_EQ(s->View().membership_epoch(), epoch + 3);
  // Long after the death the job still runs: the rank was filled in time.
  now_ += absl::Seconds(100);
  for (int rank : {0, 1}) ASSERT_TRUE(s->Heartbeat(Hb(SERVER, rank)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  s->CheckHealth();
  EXPECT_EQ(s->state(), RUNNING);
  const std::string summary = s->SummaryJson();
  EXPECT_NE(summary.find("{\"seconds\": 3.5, \"role\": \"server\", \"rank\": 1, \"kind\": \"died\"}, "
                         "{\"seconds\": 8.5, \"role\": \"server\", \"rank\": 1, \"kind\": \"joined\"}"),
            std::string::npos)
      << summary;
}

TEST_F(SchedulerTest, RestoreStepIsZeroWithoutACommonCheckpoint) {
  auto s = MakeRecovering();
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(0, {10, 20})).ok());  // Server 1 never reported.
  LetServerDie(s.get(), 0);
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:9")).ok());
  ASSERT_TRUE(s->View().has_restore_step());
  EXPECT_EQ(s->View().restore_step(), 0);
}

TEST_F(SchedulerTest, AReplacementsReportReplacesItsRanksCheckpoints) {
  auto s = MakeRecovering();
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(0, {10, 20})).ok());
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(1, {10, 20})).ok());
  LetServerDie(s.get(), 1);
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:9")).ok());
  EXPECT_EQ(s->View().restore_step(), 20);
  // After the roll-back both go on and checkpoint step 30; the replacement lost step 10's file.
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 1)).ok());
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(1, {20, 30})).ok());
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(0, {20, 30})).ok());
  // Now server 0 dies: a second recovery. restore_step is dropped while the rank is vacant.
  LetServerDie(s.get(), 0);
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_FALSE(s->View().has_restore_step());
  EXPECT_EQ(s->View().restore_epoch(), 0);
  ASSERT_EQ(s->Register(Reg(SERVER, "h:11"))->rank(), 0);
  EXPECT_EQ(s->View().restore_step(), 30);
  EXPECT_EQ(s->View().restore_epoch(), s->View().membership_epoch());
}

TEST_F(SchedulerTest, RestoreStepWaitsUntilEveryVacantRankIsFilled) {
  auto s = MakeRecovering();
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(0, {10, 20})).ok());
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(1, {10, 20})).ok());
  now_ += absl::Seconds(3.5);
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  s->CheckHealth();  // Both servers died.
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_TRUE(s->View().servers().empty());
  ASSERT_EQ(s->Register(Reg(SERVER, "h:9"))->rank(), 0);
  EXPECT_FALSE(s->View().has_restore_step());
  ASSERT_EQ(s->Register(Reg(SERVER, "h:10"))->rank(), 1);
  EXPECT_EQ(s->View().restore_step(), 20);
}

TEST_F(SchedulerTest, ServerNotReplacedInTimeFailsTheJob) {
  auto s = MakeRecovering();
  LetServerDie(s.get(), 1);
  ASSERT_EQ(s->state(), RUNNING);
  // Barriers of every live participant do not wait for the vacant rank.
  int released = 0;
  BarrierRequest b;
  b.set_name("servers-ready");
  b.set_participants(BarrierRequest::ALL);
  for (Role role : {SERVER, WORKER}) {
    for (int rank : {0, 1}) {
      if (role == SERVER && rank == 1) continue;
      b.set_role(role);
      b.set_rank(rank);
      s->Barrier(b, [&](absl::Status st) { released += st.ok(); });
    }
  }
  EXPECT_EQ(released, 3);

  for (int i = 0; i < 28; ++i) {  // 56 s after the death: still waiting.
    now_ += absl::Seconds(2);
    ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
    for (int rank : {0, 1}) ASSERT_TRUE(s->Heartbeat(Hb(WORKER, rank)).ok());
    s->CheckHealth();
    ASSERT_EQ(s->state(), RUNNING) << s->failure();
  }
  now_ += absl::Seconds(4.5);
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  for (int rank : {0, 1}) ASSERT_TRUE(s->Heartbeat(Hb(WORKER, rank)).ok());
  s->CheckHealth();
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_EQ(s->failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s->failure().message(), "server 1 died and no replacement registered within 60 s");
  EXPECT_EQ(s->Register(Reg(SERVER, "h:9")).status().code(), absl::StatusCode::kAborted);
}

TEST_F(SchedulerTest, BadCheckpointReportsAreRefused) {
  auto s = MakeRecovering();
  absl::Status st = s->ReportCheckpoints(Checkpoints(0, {20, 10}));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "checkpoint report from server 0: step 10 at index 1 after 20, expected strictly ascending steps >= 0");
  EXPECT_EQ(s->ReportCheckpoints(Checkpoints(0, {-1})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->ReportCheckpoints(Checkpoints(5, {10})).code(), absl::StatusCode::kFailedPrecondition);
  // The refused reports recorded nothing: the cut is still empty.
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(1, {10})).ok());
  LetServerDie(s.get(), 1);
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:9")).ok());
  EXPECT_EQ(s->View().restore_step(), 0);
  ASSERT_TRUE(s->ReportCheckpoints(Checkpoints(1, {})).ok());  // Empty is fine.
}

TEST_F(SchedulerTest, LeaveRemovesTheWorkerAtOnce) {
  auto s = Make(SYNC, 3);
  RegisterAll(s.get(), 3);
  const int64_t epoch = s->View().membership_epoch();
  LeaveRequest leave;
  leave.set_role(WORKER);
  leave.set_rank(1);
  leave.set_reason("asked to stop (SIGTERM)");
  ASSERT_TRUE(s->Leave(leave).ok());
  ASSERT_TRUE(s->Leave(leave).ok());  // Idempotent.
  EXPECT_EQ(s->View().membership_epoch(), epoch + 1);
  EXPECT_EQ(WorkerRanks(s->View()), (std::vector<int>{0, 2}));
  EXPECT_EQ(s->state(), RUNNING);
  absl::StatusOr<HeartbeatResponse> hb = s->Heartbeat(Hb(WORKER, 1));
  EXPECT_EQ(hb.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(hb.status().message().find("it left"), absl::string_view::npos) << hb.status();
  EXPECT_EQ(s->LeaseWork(EvalRequest(1, 0)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s->SummaryJson().find("\"kind\": \"left\""), std::string::npos);
  EXPECT_NE(s->SummaryJson().find("\"live_workers\": [0, 2]"), std::string::npos);

  leave.set_rank(7);
  EXPECT_EQ(s->Leave(leave).code(), absl::StatusCode::kFailedPrecondition);
  leave.set_role(SERVER);
  leave.set_rank(0);
  EXPECT_EQ(s->Leave(leave).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->View().servers_size(), 1);
}

TEST_F(SchedulerTest, WorkerJoiningARunningJobTakesANewRank) {
  auto s = Make();
  RegisterAll(s.get());
  LeaveRequest leave;
  leave.set_role(WORKER);
  leave.set_rank(0);
  ASSERT_TRUE(s->Leave(leave).ok());
  const int64_t epoch = s->View().membership_epoch();
  absl::StatusOr<RegisterResponse> joined = s->Register(Reg(WORKER, "h:9"));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->rank(), 2);  // Rank 0 is never handed out again.
  EXPECT_EQ(s->View().membership_epoch(), epoch + 1);
  absl::StatusOr<RegisterResponse> grown = s->Register(Reg(WORKER, "h:10"));
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_EQ(grown->rank(), 3);  // Beyond num_workers: the job grows.
  const ClusterView view = s->View();
  EXPECT_EQ(WorkerRanks(view), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(view.workers(1).address(), "h:9");
  EXPECT_EQ(view.global_batch(), 20);  // batch_size 10 x the job's 2 workers, always.
  EXPECT_EQ(view.state(), RUNNING);
  // The newcomers heartbeat and take part.
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 2)).ok());
  ASSERT_TRUE(s->LeaseWork(EvalRequest(3, 0)).ok());
  // The one that left stays out.
  EXPECT_EQ(s->Heartbeat(Hb(WORKER, 0)).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerTest, BarrierReleasesWhenTheLastMissingWorkerDies) {
  auto s = Make(ASYNC, 3);
  RegisterAll(s.get(), 3);
  int released = 0;
  BarrierRequest b;
  b.set_name("epoch-0-trained");
  b.set_participants(BarrierRequest::WORKERS);
  b.set_role(WORKER);
  for (int rank : {0, 2}) {
    b.set_rank(rank);
    s->Barrier(b, [&](absl::Status st) { released += st.ok(); });
  }
  EXPECT_EQ(released, 0);
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Seconds(2);
  for (int rank : {0, 2}) ASSERT_TRUE(s->Heartbeat(Hb(WORKER, rank)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();  // Worker 1 is removed; nobody else is awaited.
  EXPECT_EQ(released, 2);
  // The dead worker may not enter barriers any more.
  std::optional<absl::Status> late;
  b.set_rank(1);
  s->Barrier(b, [&](absl::Status st) { late = st; });
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerTest, EvaluationLeasesOfADeadWorkerAreEvaluatedByOthers) {
  auto s = Make();
  RegisterAll(s.get());
  TrainEpoch0(s.get());
  absl::StatusOr<LeaseResponse> held = s->LeaseWork(EvalRequest(1, 0));
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->end() - held->begin(), 5);
  EXPECT_EQ(EvaluateAll(s.get(), 0), 7);
  absl::StatusOr<LeaseResponse> wait = s->LeaseWork(EvalRequest(0, 0));
  ASSERT_TRUE(wait.ok());
  EXPECT_TRUE(wait->wait());
  EXPECT_FALSE(wait->epoch_done());
  // Worker 1 dies holding its lease: worker 0 gets it.
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();
  absl::StatusOr<LeaseResponse> again = s->LeaseWork(EvalRequest(0, 0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->lease_id(), held->lease_id());
  EXPECT_EQ(again->begin(), held->begin());
  ASSERT_TRUE(s->ReportProgress(EvalResult(0, *again)).ok());
  EXPECT_TRUE(s->LeaseWork(EvalRequest(0, 0))->epoch_done());
  // Worker 1's late report of the same lease does not count twice; its done does not count.
  ProgressReport late = EvalResult(1, *held);
  late.set_done(true);
  ASSERT_TRUE(s->ReportProgress(late).ok());
  EXPECT_EQ(s->state(), RUNNING);
  ASSERT_TRUE(s->ReportProgress(Done(0)).ok());
  EXPECT_EQ(s->state(), FINISHED);
  const JobStatus status = s->Status();
  ASSERT_EQ(status.epochs_done_size(), 1);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).test_accuracy(), 0.8);  // Each of the 40 samples once.
  const std::string summary = s->SummaryJson();
  EXPECT_NE(summary.find("\"live_workers\": [0]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"kind\": \"died\""), std::string::npos) << summary;
}

TEST_F(SchedulerTest, BadEvaluationReportsAreRefused) {
  auto s = Make();
  RegisterAll(s.get());
  TrainEpoch0(s.get());
  absl::StatusOr<LeaseResponse> lease = s->LeaseWork(EvalRequest(0, 0));
  ASSERT_TRUE(lease.ok());
  ProgressReport wrong = EvalResult(0, *lease);
  wrong.mutable_evals(0)->set_samples(4);
  EXPECT_EQ(s->ReportProgress(wrong).code(), absl::StatusCode::kInvalidArgument);
  wrong = EvalResult(0, *lease);
  wrong.mutable_evals(0)->set_lease_id(99);
  EXPECT_EQ(s->ReportProgress(wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->ReportProgress(Done(5)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->LeaseWork(EvalRequest(0, 1)).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(SchedulerTest, StartupTimeoutFailsTheJob) {
  auto s = Make();
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  for (int i = 0; i < 30; ++i) {
    now_ += absl::Seconds(2);
    ASSERT_TRUE(s->Heartbeat(hb).ok());
    s->CheckHealth();
  }
  EXPECT_EQ(s->state(), WAITING_FOR_ROLES);
  now_ += absl::Seconds(1);
  ASSERT_TRUE(s->Heartbeat(hb).ok());
  s->CheckHealth();
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_EQ(s->failure().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s->failure().message(), "only 1 of 1 servers and 0 of 2 workers registered within 1m");
}

TEST_F(SchedulerTest, RoleThatNeverHeartbeatsFailsTheJobAfterTheStartupTimeout) {
  auto s = Make(SYNC, 1);
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:2")).ok());
  HeartbeatRequest hb;
  hb.set_role(WORKER);
  now_ += absl::Seconds(59);
  ASSERT_TRUE(s->Heartbeat(hb).ok());
  s->CheckHealth();
  EXPECT_EQ(s->state(), RUNNING);  // The server is still setting up; that is allowed.
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(hb).ok());
  s->CheckHealth();
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_EQ(s->failure().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s->failure().message(), "server 0 at h:1 sent no heartbeat in the 61.0 s since it registered");
}

TEST_F(SchedulerTest, JobFinishesWhenEveryWorkerIsDone) {
  auto s = Make();
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:2")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:3")).ok());
  TrainEpoch0(s.get());
  EXPECT_EQ(EvaluateAll(s.get(), 0) + EvaluateAll(s.get(), 1), 8);
  ASSERT_TRUE(s->ReportProgress(Done(0)).ok());
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_FALSE(s->AwaitEnd(absl::ZeroDuration()));
  now_ += absl::Seconds(1);
  ASSERT_TRUE(s->ReportProgress(Done(1)).ok());
  EXPECT_EQ(s->state(), FINISHED);
  EXPECT_TRUE(s->AwaitEnd(absl::ZeroDuration()));
  EXPECT_TRUE(s->failure().ok());
  EXPECT_FALSE(s->ServersKnowTheEnd());
  now_ += absl::Milliseconds(100);
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  absl::StatusOr<HeartbeatResponse> answer = s->Heartbeat(hb);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->state(), FINISHED);
  EXPECT_TRUE(s->ServersKnowTheEnd());
  EXPECT_EQ(s->OutcomeLine(), "job FINISHED: test accuracy 0.8000, test loss 0.2000, 0 samples/s");
  const JobStatus status = s->Status();
  EXPECT_EQ(status.state(), FINISHED);
  EXPECT_EQ(status.registered_workers(), 2);
  ASSERT_EQ(status.epochs_done_size(), 1);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).test_accuracy(), 0.8);
  // Nobody joins a finished job: a newcomer (a role restarted after the end) is told it is over;
  // a registered worker's retry still gets its rank.
  for (Role role : {WORKER, SERVER}) {
    absl::StatusOr<RegisterResponse> late = s->Register(Reg(role, "h:9"));
    ASSERT_TRUE(late.ok()) << late.status();
    EXPECT_EQ(late->job_state(), FINISHED);
    EXPECT_EQ(late->rank(), -1);
    EXPECT_FALSE(late->has_job());
  }
  EXPECT_EQ(s->Register(Reg(WORKER, "h:3"))->rank(), 1);
  EXPECT_EQ(s->Register(Reg(WORKER, "h:3"))->job_state(), FINISHED);
}

TEST_F(SchedulerTest, JobFinishesWhenEveryLiveWorkerIsDoneAfterADeath) {
  auto s = Make();
  RegisterAll(s.get());
  TrainEpoch0(s.get());
  EXPECT_EQ(EvaluateAll(s.get(), 0), 8);
  ASSERT_TRUE(s->ReportProgress(Done(0)).ok());
  EXPECT_EQ(s->state(), RUNNING);  // Worker 1 is live and not done.
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();
  EXPECT_EQ(s->state(), FINISHED);
  EXPECT_TRUE(s->failure().ok());
}

TEST_F(SchedulerTest, LeasesOnlyInAsyncModesAndOnlyWhenRunning) {
  auto sync = Make(SYNC, 1);
  ASSERT_TRUE(sync->Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(sync->Register(Reg(WORKER, "h:2")).ok());
  LeaseRequest req;
  EXPECT_EQ(sync->LeaseWork(req).status().code(), absl::StatusCode::kFailedPrecondition);

  auto async = Make(ASYNC, 1);
  ASSERT_TRUE(async->Register(Reg(SERVER, "h:1")).ok());
  EXPECT_EQ(async->LeaseWork(req).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(async->Register(Reg(WORKER, "h:2")).ok());
  absl::StatusOr<LeaseResponse> lease = async->LeaseWork(req);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->begin(), 0);
  EXPECT_EQ(lease->end(), 20);
  EXPECT_EQ(lease->lease_id(), 1);
  req.set_worker_rank(1);
  EXPECT_EQ(async->LeaseWork(req).status().code(), absl::StatusCode::kFailedPrecondition);
  // Evaluation leases are for every mode.
  EXPECT_TRUE(sync->LeaseWork(EvalRequest(0, 0)).ok());
}

// Training leases of 2 batches of 10 over 50 samples: [0, 20), [20, 40), [40, 50). Worker 1 dies
// having reported 1 batch of its lease; worker 0 trains the rest of it, and the epoch counts each
// sample once.
TEST_F(SchedulerTest, AsyncRemainderOfADeadWorkersLeaseIsTrainedOnceAndCountedOnce) {
  auto s = Make(ASYNC, 2);
  RegisterAll(s.get());
  auto lease_for = [&](int rank) { return test_util::LeaseFor(s.get(), rank); };
  auto report = [&](int rank, int64_t lease_id, int64_t batches_done, int64_t samples) {
    ProgressReport r;
    r.set_worker_rank(rank);
    r.mutable_train()->set_samples(samples);
    r.mutable_train()->set_steps((samples + 9) / 10);
    r.mutable_train()->set_loss_sum(0.5 * static_cast<double>(samples));
    LeaseProgress* p = r.add_leases();
    p->set_lease_id(lease_id);
    p->set_batches_done(batches_done);
    absl::Status status = s->ReportProgress(r);
    // The server applied what the worker pushed (a dead worker's server applied it too).
    if (status.ok()) {
      EXPECT_TRUE(s->Heartbeat(test_util::ConfirmedBy(0, r)).ok());
    }
    return status;
  };
  const LeaseResponse a = lease_for(0);
  const LeaseResponse b = lease_for(1);
  ASSERT_EQ(b.begin(), 20);
  ASSERT_TRUE(report(1, b.lease_id(), 1, 10).ok());
  ASSERT_TRUE(report(0, a.lease_id(), 2, 20).ok());
  const LeaseResponse c = lease_for(0);
  EXPECT_EQ(c.begin(), 40);
  ASSERT_TRUE(report(0, c.lease_id(), 1, 10).ok());
  // Lease b is out with worker 1: worker 0 waits rather than ending the epoch.
  const LeaseResponse waiting = lease_for(0);
  EXPECT_TRUE(waiting.wait());
  EXPECT_FALSE(waiting.epoch_done());

  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();  // Worker 1 is removed; lease b goes back as a remainder.
  ASSERT_EQ(s->state(), RUNNING);

  const LeaseResponse rest = lease_for(0);
  EXPECT_FALSE(rest.wait());
  EXPECT_EQ(rest.lease_id(), b.lease_id());
  EXPECT_EQ(rest.begin(), 20);
  EXPECT_EQ(rest.end(), 40);
  EXPECT_EQ(rest.first_batch(), 1);
  // The dead worker's late report (no higher than what it reported) is accepted and changes nothing.
  EXPECT_TRUE(report(1, b.lease_id(), 1, 0).ok());
  // Reports that do not fit a lease are refused whole.
  EXPECT_EQ(report(0, 9, 1, 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(report(0, b.lease_id(), 3, 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(lease_for(0).wait());
  ASSERT_TRUE(report(0, b.lease_id(), 2, 10).ok());
  EXPECT_TRUE(lease_for(0).epoch_done());

  const std::string summary = s->SummaryJson();
  // 50 samples: the 10 worker 1 trained and the 10 worker 0 trained of lease b count once, as b.
  EXPECT_NE(summary.find("\"samples\": 50,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"train_loss\": 0.5,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("{\"rank\": 0, \"samples\": 40, "), std::string::npos) << summary;
  EXPECT_NE(summary.find("{\"rank\": 1, \"samples\": 10, "), std::string::npos) << summary;
}

TEST_F(SchedulerTest, LeaveReturnsTheTrainingLeaseAsARemainder) {
  auto s = Make(ASYNC, 2);
  RegisterAll(s.get());
  LeaseRequest r;
  r.set_worker_rank(1);
  absl::StatusOr<LeaseResponse> held = s->LeaseWork(r);
  ASSERT_TRUE(held.ok()) << held.status();
  LeaveRequest leave;
  leave.set_role(WORKER);
  leave.set_rank(1);
  ASSERT_TRUE(s->Leave(leave).ok());
  r.set_worker_rank(0);
  absl::StatusOr<LeaseResponse> rest = s->LeaseWork(r);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->lease_id(), held->lease_id());
  EXPECT_EQ(rest->first_batch(), 0);
}

TEST(NewestCommonStepTest, IsTheNewestStepEveryServerHolds) {
  EXPECT_EQ(NewestCommonStep({{10, 20}, {10}}), 10);
  EXPECT_EQ(NewestCommonStep({{10, 20}, {10, 20}}), 20);
  EXPECT_EQ(NewestCommonStep({{20, 30}, {10, 20}, {20}}), 20);
  EXPECT_EQ(NewestCommonStep({{10, 20}, {}}), 0);
  EXPECT_EQ(NewestCommonStep({{10, 20}, {30, 40}}), 0);
  EXPECT_EQ(NewestCommonStep({{5}}), 5);
  EXPECT_EQ(NewestCommonStep({}), 0);
  EXPECT_EQ(NewestCommonStep({{10, 20}, {10}}, 15), 0);
  EXPECT_EQ(NewestCommonStep({{10, 20}, {10, 20}}, 20), 20);
}

TEST(TotalStepsTest, FollowsTheMode) {
  JobSpec job;
  job.set_epochs(3);
  job.set_batch_size(10);
  job.set_mode(SYNC);
  EXPECT_EQ(TotalSteps(job, 95, 5), 15);
  job.set_max_steps(7);
  EXPECT_EQ(TotalSteps(job, 95, 5), 7);
  job.set_max_steps(100);
  EXPECT_EQ(TotalSteps(job, 95, 5), 15);
  job.set_mode(ASYNC);
  job.set_max_steps(0);
  EXPECT_EQ(TotalSteps(job, 95, 5), 30);
  job.set_max_steps(4);
  EXPECT_EQ(TotalSteps(job, 95, 5), 4);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
