#include "scheduler/scheduler.h"

#include <memory>
#include <optional>
#include <string>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "scheduler/shard_map.h"

namespace pstrain {
namespace scheduler {
namespace {

// A scheduler for a 1-server, 2-worker job on a clock the test moves by hand.
class SchedulerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Scheduler> Make(Mode mode = SYNC, int workers = 2) {
    JobSpec job;
    job.set_num_servers(1);
    job.set_num_workers(workers);
    job.set_epochs(1);
    job.set_mode(mode);
    job.set_batch_size(10);
    job.set_lease_batches(2);
    ApplyJobDefaults(&job);
    TensorSpec t;
    t.set_name("w");
    t.add_shape(8);
    t.set_num_elements(8);
    Scheduler::Options options;
    options.job = job;
    options.shard_map = *BuildShardMap({t}, 1, 1024);
    options.train_samples = 50;
    options.test_samples = 20;
    options.total_steps = 3;
    options.dead_after = absl::Seconds(3);
    options.startup_timeout = absl::Seconds(60);
    options.clock = [this] { return now_; };
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(options);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(s).value();
  }

  static RegisterRequest Reg(Role role, const std::string& address) {
    RegisterRequest r;
    r.set_role(role);
    r.set_address(address);
    return r;
  }

  static ProgressReport Done(int rank) {
    ProgressReport r;
    r.set_worker_rank(rank);
    r.mutable_eval()->set_loss_sum(2.0);
    r.mutable_eval()->set_correct(8);
    r.mutable_eval()->set_samples(10);
    r.set_done(true);
    return r;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
};

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

TEST_F(SchedulerTest, FailureAbortsParkedCallsAndIsReportedEverywhere) {
  auto s = Make();
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:2")).ok());
  std::optional<absl::StatusOr<ClusterView>> view;
  std::optional<absl::Status> barrier;
  s->WhenRunning([&](absl::StatusOr<ClusterView> v) { view = std::move(v); });
  BarrierRequest b;
  b.set_name("start");
  b.set_role(WORKER);
  b.set_rank(0);
  s->Barrier(b, [&](absl::Status st) { barrier = st; });
  EXPECT_FALSE(view.has_value() || barrier.has_value());

  FailureReport f;
  f.set_role(WORKER);
  f.set_rank(0);
  f.set_message("out of memory");
  s->ReportFailure(f);
  ASSERT_TRUE(view.has_value() && barrier.has_value());
  EXPECT_EQ(view->status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(view->status().message(), "job failed: worker 0 at h:2: out of memory");
  EXPECT_EQ(barrier->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s->state(), FAILED);

  HeartbeatRequest hb;
  hb.set_role(SERVER);
  absl::StatusOr<HeartbeatResponse> answer = s->Heartbeat(hb);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->state(), FAILED);
  EXPECT_EQ(answer->failure(), "worker 0 at h:2: out of memory");
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
  b.set_name("end");
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

TEST_F(SchedulerTest, SilentRoleFailsTheJob) {
  auto s = Make();
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:2")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:3")).ok());
  HeartbeatRequest hb;
  hb.set_role(WORKER);
  hb.set_rank(1);
  ASSERT_TRUE(s->Heartbeat(hb).ok());
  hb.set_rank(0);
  now_ += absl::Seconds(2);
  hb.set_role(SERVER);
  ASSERT_TRUE(s->Heartbeat(hb).ok());
  hb.set_role(WORKER);
  ASSERT_TRUE(s->Heartbeat(hb).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_EQ(s->failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s->failure().message(), "worker 1 at h:3 sent no heartbeat for 3.5 s");
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
