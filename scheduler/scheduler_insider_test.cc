// The scheduler's rules against an insider: a member with its own valid session (here simply a
// registered worker rank) that abuses the calls a worker may make. Each rule: the abuse is refused
// or bounded, and honest members are not affected.
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/member_limits.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"

namespace pstrain::scheduler {
namespace {

using test_util::ConfirmedBy;
using test_util::Hb;
using test_util::Reg;
using test_util::TinyJobOptions;
using ::testing::HasSubstr;

class InsiderTest : public ::testing::Test {
 protected:
  // One server, `workers` workers, `epochs` epochs of 50 training samples (SYNC: global batch
  // 10 x workers) and 40 test samples, dead_after 3 s, startup timeout 60 s; running, everyone
  // heartbeated. `hold_up_after`: Options::hold_up_after (zero: dead_after).
  std::unique_ptr<Scheduler> Make(Mode mode, int workers, int min_workers = 1, int epochs = 1,
                                  absl::Duration hold_up_after = absl::ZeroDuration()) {
    JobSpec job;
    job.set_num_servers(1);
    job.set_num_workers(workers);
    job.set_min_workers(min_workers);
    job.set_epochs(epochs);
    job.set_mode(mode);
    job.set_batch_size(10);
    job.set_lease_batches(2);
    const int64_t steps_per_epoch = mode == SYNC ? (50 + 10 * workers - 1) / (10 * workers) : 5;
    Scheduler::Options options = TinyJobOptions(job, 8, 50, 40, epochs * steps_per_epoch, [this] { return now_; });
    options.startup_timeout = absl::Seconds(60);
    options.hold_up_after = hold_up_after;
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(options);
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE((*s)->Register(Reg(SERVER, "h:1")).ok());
    for (int w = 0; w < workers; ++w) EXPECT_TRUE((*s)->Register(Reg(WORKER, absl::StrCat("h:", w + 2))).ok());
    EXPECT_EQ((*s)->state(), RUNNING);
    HeartbeatAll(s->get());
    return std::move(s).value();
  }

  // Every live member heartbeats.
  static void HeartbeatAll(Scheduler* s) {
    const ClusterView view = s->View();
    for (const ServerInfo& server : view.servers()) EXPECT_TRUE(s->Heartbeat(Hb(SERVER, server.rank())).ok());
    for (const WorkerInfo& worker : view.workers()) EXPECT_TRUE(s->Heartbeat(Hb(WORKER, worker.rank())).ok());
  }

  // Moves the clock by `d` in steps of 1 s, everyone heartbeating, running the watchdog each time.
  void Pass(Scheduler* s, absl::Duration d) {
    for (absl::Duration left = d; left > absl::ZeroDuration(); left -= absl::Seconds(1)) {
      now_ += std::min(left, absl::Seconds(1));
      HeartbeatAll(s);
      s->CheckHealth();
    }
  }

  static std::vector<int> Workers(const Scheduler& s) {
    std::vector<int> ranks;
    const ClusterView view = s.View();
    for (const WorkerInfo& w : view.workers()) ranks.push_back(w.rank());
    return ranks;
  }

  static ProgressReport StepReport(int rank, int64_t step, int epoch = 0) {
    ProgressReport r;
    r.set_worker_rank(rank);
    r.set_epoch(epoch);
    r.set_step(step);
    return r;
  }

  static LeaseRequest EvalRequest(int rank, int epoch) {
    LeaseRequest r;
    r.set_worker_rank(rank);
    r.set_epoch(epoch);
    r.set_eval(true);
    return r;
  }

  static ProgressReport EvalResult(int rank, const LeaseResponse& lease, int64_t step, double loss_per_sample = 0.2) {
    ProgressReport r = StepReport(rank, step);
    EvalStats* e = r.add_evals();
    e->set_lease_id(lease.lease_id());
    e->set_samples(lease.end() - lease.begin());
    e->set_correct(e->samples() / 2);
    e->set_loss_sum(loss_per_sample * static_cast<double>(e->samples()));
    return r;
  }

  static void EnterBarrier(Scheduler* s, const std::string& name, BarrierRequest::Participants group, Role role,
                           int rank, std::optional<absl::Status>* answer) {
    BarrierRequest b;
    b.set_name(name);
    b.set_participants(group);
    b.set_role(role);
    b.set_rank(rank);
    s->Barrier(b, [answer](absl::Status st) { *answer = st; });
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
};

// Item 4: evaluation leases of an epoch go out only once its training is over.
TEST_F(InsiderTest, SyncEvaluationLeasesGoOutOnlyOnceEveryReportingWorkerReachedTheEpochsEnd) {
  auto s = Make(SYNC, 3, 1, /*epochs=*/2);  // 2 steps an epoch (global batch 30 of 50).
  // The insider (worker 2) asks for the test set of every epoch before anyone trained.
  for (int epoch : {0, 1}) {
    absl::StatusOr<LeaseResponse> early = s->LeaseWork(EvalRequest(2, epoch));
    ASSERT_TRUE(early.ok()) << early.status();
    EXPECT_TRUE(early->wait());
    EXPECT_EQ(early->lease_id(), 0);
  }
  // Claiming the epoch's last step does not help while the others report that they are behind.
  ASSERT_TRUE(s->ReportProgress(StepReport(0, 1)).ok());
  ASSERT_TRUE(s->ReportProgress(StepReport(1, 1)).ok());
  ASSERT_TRUE(s->ReportProgress(StepReport(2, 2)).ok());
  EXPECT_TRUE(s->LeaseWork(EvalRequest(2, 0))->wait());
  // Once every reporting worker is at step 2, epoch 0 is evaluated (by whoever asks) and epoch 1
  // still waits.
  ASSERT_TRUE(s->ReportProgress(StepReport(0, 2)).ok());
  ASSERT_TRUE(s->ReportProgress(StepReport(1, 2)).ok());
  absl::StatusOr<LeaseResponse> lease = s->LeaseWork(EvalRequest(0, 0));
  ASSERT_TRUE(lease.ok());
  EXPECT_FALSE(lease->wait());
  EXPECT_GT(lease->lease_id(), 0);
  EXPECT_TRUE(s->LeaseWork(EvalRequest(2, 1))->wait());
}

TEST_F(InsiderTest, AsyncEvaluationLeasesGoOutOnlyOnceEveryTrainingLeaseIsComplete) {
  auto s = Make(ASYNC, 2);
  EXPECT_TRUE(s->LeaseWork(EvalRequest(1, 0))->wait());
  LeaseRequest train;
  train.set_worker_rank(0);
  std::vector<LeaseResponse> leases;
  for (absl::StatusOr<LeaseResponse> l = s->LeaseWork(train); l.ok() && !l->wait() && !l->epoch_done();
       l = s->LeaseWork(train)) {
    leases.push_back(*l);
  }
  ASSERT_EQ(leases.size(), 3u);  // [0, 20), [20, 40), [40, 50).
  EXPECT_TRUE(s->LeaseWork(EvalRequest(1, 0))->wait());
  ProgressReport done = StepReport(0, 5);
  done.mutable_train()->set_steps(5);
  done.mutable_train()->set_samples(50);
  for (const LeaseResponse& l : leases) {
    LeaseProgress* p = done.add_leases();
    p->set_lease_id(l.lease_id());
    p->set_batches_done((l.end() - l.begin() + 9) / 10);
  }
  ASSERT_TRUE(s->ReportProgress(done).ok());
  // The worker's word alone completes nothing: the server has not confirmed the batches.
  EXPECT_TRUE(s->LeaseWork(EvalRequest(1, 0))->wait());
  EXPECT_TRUE(s->LeaseWork(train)->wait());
  ASSERT_TRUE(s->Heartbeat(ConfirmedBy(0, done)).ok());
  absl::StatusOr<LeaseResponse> eval = s->LeaseWork(EvalRequest(1, 0));
  ASSERT_TRUE(eval.ok());
  EXPECT_FALSE(eval->wait());
  EXPECT_GT(eval->lease_id(), 0);
}

// ASYNC epoch end: a worker whose leases' batches keep reaching the server is slow, not holding
// anyone up; one whose leases stop moving on the server (whatever it reports) is evicted after
// dead_after, and its lease goes to the other worker from the batch the server confirmed.
TEST_F(InsiderTest, AnAsyncEpochEndEvictsOnlyAHolderWhoseLeasesStopReachingTheServer) {
  auto s = Make(ASYNC, 2);
  auto lease = [&](int rank) {
    LeaseRequest r;
    r.set_worker_rank(rank);
    return s->LeaseWork(r).value_or(LeaseResponse());
  };
  auto applied = [&](int64_t id, int64_t batches) {
    ProgressReport r;
    r.set_worker_rank(0);
    LeaseProgress* p = r.add_leases();
    p->set_lease_id(id);
    p->set_batches_done(batches);
    return ConfirmedBy(0, r);
  };
  const LeaseResponse a = lease(0), b = lease(1), c = lease(0);  // [0, 20), [20, 40), [40, 50)
  ASSERT_EQ(c.end(), 50);
  ASSERT_TRUE(s->Heartbeat(applied(a.lease_id(), 2)).ok());
  ASSERT_TRUE(s->Heartbeat(applied(c.lease_id(), 1)).ok());
  ASSERT_TRUE(lease(0).wait());  // Every position is cut; a and c are complete, b is out with worker 1.
  // Worker 1's first batch of b reaches the server after 2 s: it is slow, and stays.
  Pass(s.get(), absl::Seconds(2));
  ASSERT_TRUE(s->Heartbeat(applied(b.lease_id(), 1)).ok());
  Pass(s.get(), absl::Seconds(2));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
  // Then nothing more reaches the server, while worker 1 heartbeats and claims b done.
  ProgressReport claim;
  claim.set_worker_rank(1);
  LeaseProgress* p = claim.add_leases();
  p->set_lease_id(b.lease_id());
  p->set_batches_done(2);
  ASSERT_TRUE(s->ReportProgress(claim).ok());
  Pass(s.get(), absl::Seconds(2));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
  Pass(s.get(), absl::Seconds(2));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0}));
  const LeaseResponse rest = lease(0);
  EXPECT_EQ(rest.lease_id(), b.lease_id());
  EXPECT_EQ(rest.first_batch(), 1);
  EXPECT_TRUE(lease(0).wait());  // Until the server confirms b's second batch.
  ASSERT_TRUE(s->Heartbeat(applied(b.lease_id(), 2)).ok());
  EXPECT_TRUE(lease(0).epoch_done());
}

TEST_F(InsiderTest, ImpossibleEvaluationReportsAreRefusedAndChangeNothing) {
  auto s = Make(SYNC, 2);
  for (int rank : {0, 1}) ASSERT_TRUE(s->ReportProgress(StepReport(rank, 3)).ok());
  absl::StatusOr<LeaseResponse> lease = s->LeaseWork(EvalRequest(1, 0));
  ASSERT_TRUE(lease.ok() && lease->lease_id() > 0);
  const std::string before = s->Snapshot().progress().SerializeAsString();
  for (double loss : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    const absl::Status refused = s->ReportProgress(EvalResult(1, *lease, 3, loss));
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << loss;
    EXPECT_THAT(refused.message(), HasSubstr("expected a finite number >= 0"));
  }
  ProgressReport too_many = EvalResult(1, *lease, 3);
  too_many.mutable_evals(0)->set_correct(too_many.evals(0).samples() + 1);
  EXPECT_EQ(s->ReportProgress(too_many).code(), absl::StatusCode::kInvalidArgument);
  ProgressReport wrong_size = EvalResult(1, *lease, 3);
  wrong_size.mutable_evals(0)->set_samples(1000);
  wrong_size.mutable_evals(0)->set_correct(1000);
  EXPECT_EQ(s->ReportProgress(wrong_size).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Snapshot().progress().SerializeAsString(), before);
  // The lease's honest result counts, once: a second report of it (another figure) changes nothing.
  ASSERT_TRUE(s->ReportProgress(EvalResult(1, *lease, 3)).ok());
  const std::string counted = s->Snapshot().progress().SerializeAsString();
  ProgressReport again = EvalResult(1, *lease, 3);
  again.mutable_evals(0)->set_correct(again.evals(0).samples());
  ASSERT_TRUE(s->ReportProgress(again).ok());
  EXPECT_EQ(s->Snapshot().progress().SerializeAsString(), counted);
}

// Item 8: a worker's failure is its own.
TEST_F(InsiderTest, AWorkersFailureMeansItLeavesAndTheJobGoesOn) {
  auto s = Make(ASYNC, 3);
  LeaseRequest train;
  train.set_worker_rank(2);
  absl::StatusOr<LeaseResponse> held = s->LeaseWork(train);
  ASSERT_TRUE(held.ok() && held->lease_id() > 0);
  const int64_t epoch = s->View().membership_epoch();
  FailureReport f;
  f.set_role(WORKER);
  f.set_rank(2);
  f.set_message(std::string(1 << 20, 'x'));
  s->ReportFailure(f);
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
  EXPECT_EQ(s->View().membership_epoch(), epoch + 1);
  // Its lease goes to another worker, from its start.
  train.set_worker_rank(0);
  absl::StatusOr<LeaseResponse> taken = s->LeaseWork(train);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->lease_id(), held->lease_id());
  // The message is kept, bounded, in the summary.
  const std::string summary = s->SummaryJson();
  EXPECT_THAT(summary, HasSubstr("\"worker_failures\": [\"worker 2 at h:4 failed: xxx"));
  EXPECT_THAT(summary, HasSubstr("bytes cut)"));
  EXPECT_LT(summary.size(), 20000u);
}

TEST_F(InsiderTest, WorkersFailingBelowMinWorkersFailTheJobQuotingTheirMessages) {
  auto s = Make(SYNC, 3, /*min_workers=*/2);
  FailureReport f;
  f.set_role(WORKER);
  f.set_rank(2);
  f.set_message("cannot read the data");
  s->ReportFailure(f);
  EXPECT_EQ(s->state(), RUNNING);
  f.set_rank(1);
  f.set_message("cannot read the data either");
  s->ReportFailure(f);
  ASSERT_EQ(s->state(), FAILED);
  EXPECT_EQ(s->failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s->failure().message(),
            "only 1 live worker left; the job needs at least 2 (--min_workers); worker 1 at h:3 failed: cannot "
            "read the data either (earlier: worker 2 at h:4 failed: cannot read the data)");
}

TEST_F(InsiderTest, TheOnlyWorkersFailureEndsTheJobAtOnce) {
  auto s = Make(SYNC, 1);
  FailureReport f;
  f.set_role(WORKER);
  f.set_rank(0);
  f.set_message("out of memory");
  s->ReportFailure(f);
  ASSERT_EQ(s->state(), FAILED);
  EXPECT_THAT(s->failure().message(), HasSubstr("worker 0 at h:2 failed: out of memory"));
}

// Item 6: barriers are the job's; strings have limits; what is kept stays bounded.
TEST_F(InsiderTest, BarrierSpamIsRefusedBeforeAnythingIsStored) {
  auto s = Make(SYNC, 2);
  const size_t state_before = s->Snapshot().ByteSizeLong();
  const size_t summary_before = s->SummaryJson().size();
  for (int i = 0; i < 1000; ++i) {
    std::optional<absl::Status> answer;
    EnterBarrier(s.get(), absl::StrCat(i, std::string(1024, 'b')), BarrierRequest::WORKERS, WORKER, 1, &answer);
    ASSERT_TRUE(answer.has_value());
    ASSERT_EQ(answer->code(), absl::StatusCode::kInvalidArgument);
  }
  std::optional<absl::Status> answer;
  EnterBarrier(s.get(), "epoch-7-trained", BarrierRequest::WORKERS, WORKER, 1, &answer);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code(), absl::StatusCode::kInvalidArgument);
  Pass(s.get(), absl::Seconds(20));
  EXPECT_EQ(s->Snapshot().ByteSizeLong(), state_before);
  EXPECT_LT(s->SummaryJson().size(), summary_before + 200);
  EXPECT_TRUE(s->DashboardStatus().stuck_barriers.empty());
}

TEST_F(InsiderTest, WorkersJoiningARunningJobAreLimitedPerMinute) {
  auto s = Make(ASYNC, 2);  // At most 10 joins a minute: twice 2 workers, at least 10.
  auto join_and_leave = [&](int i) -> absl::Status {
    absl::StatusOr<RegisterResponse> r = s->Register(Reg(WORKER, absl::StrCat("h:", 100 + i)));
    if (!r.ok()) return r.status();
    EXPECT_TRUE(s->Heartbeat(Hb(WORKER, r->rank())).ok());
    LeaveRequest leave;
    leave.set_role(WORKER);
    leave.set_rank(r->rank());
    return s->Leave(leave);
  };
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(join_and_leave(i).ok()) << i;
    now_ += absl::Seconds(1);
  }
  const int64_t epoch = s->View().membership_epoch();
  const size_t state = s->Snapshot().ByteSizeLong();
  absl::Status refused = join_and_leave(10);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "register worker at 'h:110': 10 workers joined the running job in the last minute, and the job "
            "admits at most 10 a minute (twice its most live workers, at least 10); try again in 50s");
  // Refused before anything changed: no epoch bump (which would abort a SYNC step), nothing saved.
  EXPECT_EQ(s->View().membership_epoch(), epoch);
  EXPECT_EQ(s->Snapshot().ByteSizeLong(), state);
  // A live member's retry is no join; and once the oldest join is a minute old, one more may join.
  EXPECT_TRUE(s->Register(Reg(WORKER, "h:2")).ok());
  now_ += absl::Seconds(50);
  EXPECT_TRUE(join_and_leave(11).ok());
  EXPECT_EQ(join_and_leave(12).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(InsiderTest, JoiningAndLeavingForMonthsKeepsStateSummaryAndStatusBounded) {
  auto s = Make(ASYNC, 2);
  std::string first_session;
  auto cycle = [&](int i) {
    absl::StatusOr<RegisterResponse> r = s->Register(Reg(WORKER, absl::StrCat("h:", 100 + i)));
    ASSERT_TRUE(r.ok()) << r.status();
    if (i == 0) first_session = r->session_credential();
    ASSERT_TRUE(s->Heartbeat(Hb(WORKER, r->rank())).ok());
    LeaseRequest lease;  // Leaves a record of its calls, as a worker does.
    lease.set_worker_rank(r->rank());
    lease.set_request_seq(1);
    absl::StatusOr<LeaseResponse> leased = s->LeaseWork(lease);
    ASSERT_TRUE(leased.ok()) << leased.status();
    ProgressReport report;  // And statistics of its own in the summary.
    report.set_worker_rank(r->rank());
    report.set_report_seq(1);
    report.mutable_train()->set_samples(1);
    report.mutable_train()->set_steps(1);
    ASSERT_TRUE(s->ReportProgress(report).ok());
    LeaveRequest leave;
    leave.set_role(WORKER);
    leave.set_rank(r->rank());
    ASSERT_TRUE(s->Leave(leave).ok());
    now_ += absl::Seconds(6);  // Within the limit of 10 joins a minute.
  };
  // Past the events' bound (Membership::kMaxEvents, two a cycle) and the gone workers'.
  const int first = Membership::kMaxGoneWorkers + 500;
  for (int i = 0; i < first; ++i) cycle(i);
  const size_t state = s->Snapshot().ByteSizeLong();
  const size_t summary = s->SummaryJson().size();
  const size_t members = s->DashboardStatus().members.size();
  // 1000 more: without the bound, about 22 KB more state and 170 KB more summary. The events kept
  // swing by a tenth of their bound (Membership::Record), hence the margins.
  for (int i = 0; i < 1000; ++i) cycle(first + i);
  EXPECT_LE(s->Snapshot().ByteSizeLong(), state * 105 / 100) << "was " << state;
  EXPECT_LE(s->SummaryJson().size(), summary * 115 / 100) << "was " << summary;
  EXPECT_EQ(s->DashboardStatus().members.size(), members);
  EXPECT_EQ(members, 1u + 2u + Membership::kMaxGoneWorkers);
  EXPECT_THAT(s->SummaryJson(), HasSubstr("\"forgotten_workers\": {\"workers\": "));
  // The first joiner's rank is forgotten, and still refused.
  EXPECT_EQ(s->Heartbeat(Hb(WORKER, 2)).status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<SessionClaims> session = s->Authenticate(first_session);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(session.status().message(), HasSubstr("worker 2: it left or died long ago"));
  EXPECT_EQ(s->state(), RUNNING);
}

TEST_F(InsiderTest, OversizedRegistrationStringsAreRefused) {
  auto s = Make(SYNC, 2);
  const int64_t epoch = s->View().membership_epoch();
  RegisterRequest r = Reg(WORKER, std::string(1 << 20, 'a'));
  EXPECT_EQ(s->Register(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Reg(WORKER, "h:9");
  r.set_metrics_address(std::string(1 << 20, 'm'));
  EXPECT_EQ(s->Register(r).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->View().membership_epoch(), epoch);
}

// Item 9: holding the others up gets a member evicted, even while it heartbeats.
TEST_F(InsiderTest, AWorkerThatNeverEntersABarrierIsEvictedAfterDeadAfter) {
  auto s = Make(ASYNC, 3);
  std::optional<absl::Status> a, b;
  EnterBarrier(s.get(), "epoch-0-trained", BarrierRequest::WORKERS, WORKER, 0, &a);
  EnterBarrier(s.get(), "epoch-0-trained", BarrierRequest::WORKERS, WORKER, 2, &b);
  Pass(s.get(), absl::Seconds(3));  // Not longer than dead_after: waited for.
  EXPECT_FALSE(a.has_value() || b.has_value());
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1, 2}));
  Pass(s.get(), absl::Seconds(1));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 2}));
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_TRUE(a->ok() && b->ok());
  EXPECT_EQ(s->state(), RUNNING);
  const std::string summary = s->SummaryJson();
  EXPECT_THAT(summary, HasSubstr("\"kind\": \"died\""));
  // The evicted process is no member any more.
  EXPECT_EQ(s->Heartbeat(Hb(WORKER, 1)).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(InsiderTest, TheStartBarrierWaitsUpToTheStartupTimeout) {
  auto s = Make(SYNC, 2);
  std::optional<absl::Status> server, worker;
  EnterBarrier(s.get(), "servers-ready", BarrierRequest::ALL, SERVER, 0, &server);
  EnterBarrier(s.get(), "servers-ready", BarrierRequest::ALL, WORKER, 0, &worker);
  Pass(s.get(), absl::Seconds(30));  // A worker loading its data: waited for.
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
  Pass(s.get(), absl::Seconds(31));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0}));
  ASSERT_TRUE(server.has_value() && worker.has_value());
  EXPECT_TRUE(server->ok() && worker->ok());
}

SlowStepReport Slow(int64_t step, int64_t waited_ms, std::vector<int> waiting_for) {
  SlowStepReport r;
  r.set_server_rank(0);
  r.set_step(step);
  r.set_waited_ms(waited_ms);
  r.set_typical_ms(10);
  for (int rank : waiting_for) r.add_waiting_for(rank);
  return r;
}

TEST_F(InsiderTest, AWorkerASyncStepWaitsForIsEvictedAfterDeadAfter) {
  auto s = Make(SYNC, 3);
  ASSERT_TRUE(s->ReportSlowStep(Slow(1, 1000, {1})).ok());
  Pass(s.get(), absl::Seconds(2));  // 3 s since the step's first push.
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1, 2}));
  Pass(s.get(), absl::Seconds(1));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 2}));
  EXPECT_EQ(s->state(), RUNNING);
}

TEST_F(InsiderTest, AHoldUpLimitLongerThanDeadAfterWaitsThatLong) {
  auto s = Make(SYNC, 3, 1, 1, absl::Seconds(6));
  ASSERT_TRUE(s->ReportSlowStep(Slow(1, 1000, {1})).ok());
  Pass(s.get(), absl::Seconds(5));  // 6 s since the step's first push: past dead_after, waited for.
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1, 2}));
  Pass(s.get(), absl::Seconds(1));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 2}));
  EXPECT_EQ(s->state(), RUNNING);
}

TEST_F(InsiderTest, ASlowWorkerThatGoesOnIsOnlyReported) {
  auto s = Make(SYNC, 3);
  ASSERT_TRUE(s->ReportSlowStep(Slow(1, 1000, {1})).ok());
  Pass(s.get(), absl::Seconds(1));
  ASSERT_TRUE(s->ReportProgress(StepReport(1, 2)).ok());  // Step 1 applied: it pushed.
  Pass(s.get(), absl::Seconds(5));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1, 2}));
  EXPECT_THAT(s->SummaryJson(), HasSubstr("\"waiting_for\": [1]"));
}

TEST_F(InsiderTest, AWorkerThatHoldsUpASyncEpochEndIsEvicted) {
  auto s = Make(SYNC, 2);  // 3 steps.
  ASSERT_TRUE(s->ReportProgress(StepReport(0, 3)).ok());
  ASSERT_TRUE(s->ReportProgress(StepReport(1, 1)).ok());  // And never again.
  EXPECT_TRUE(s->LeaseWork(EvalRequest(0, 0))->wait());
  Pass(s.get(), absl::Seconds(3));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
  Pass(s.get(), absl::Seconds(1));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0}));
  absl::StatusOr<LeaseResponse> lease = s->LeaseWork(EvalRequest(0, 0));
  ASSERT_TRUE(lease.ok());
  EXPECT_GT(lease->lease_id(), 0);
}

TEST_F(InsiderTest, AnEarlyEvaluationRequestEvictsNobody) {
  auto s = Make(SYNC, 2);  // 3 steps.
  ASSERT_TRUE(s->ReportProgress(StepReport(0, 1)).ok());
  ASSERT_TRUE(s->ReportProgress(StepReport(1, 1)).ok());
  EXPECT_TRUE(s->LeaseWork(EvalRequest(1, 0))->wait());  // Before it reached the end itself.
  Pass(s.get(), absl::Seconds(10));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
}

TEST_F(InsiderTest, AClaimedEpochEndDoesNotEvictAWorkerStillTraining) {
  auto s = Make(SYNC, 2, 1, /*epochs=*/4);  // 3 steps an epoch.
  ASSERT_TRUE(s->ReportProgress(StepReport(0, 1)).ok());
  ASSERT_TRUE(s->ReportProgress(StepReport(1, 3)).ok());  // A false claim, say.
  EXPECT_TRUE(s->LeaseWork(EvalRequest(1, 0))->wait());
  ASSERT_TRUE(s->ReportProgress(StepReport(0, 2)).ok());  // Worker 0 trains on, slowly.
  Pass(s.get(), absl::Seconds(3));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
  Pass(s.get(), absl::Seconds(1));  // Its step stopped moving for longer than dead_after.
  EXPECT_EQ(Workers(*s), (std::vector<int>{1}));
}

TEST_F(InsiderTest, AWorkerSittingOnAnEvaluationLeaseIsEvicted) {
  auto s = Make(SYNC, 3);  // 2 steps.
  for (int rank : {0, 1, 2}) ASSERT_TRUE(s->ReportProgress(StepReport(rank, 2)).ok());
  absl::StatusOr<LeaseResponse> honest = s->LeaseWork(EvalRequest(0, 0));
  absl::StatusOr<LeaseResponse> held = s->LeaseWork(EvalRequest(2, 0));
  ASSERT_TRUE(honest.ok() && held.ok() && held->lease_id() > 0);
  Pass(s.get(), absl::Seconds(1));
  ASSERT_TRUE(s->ReportProgress(EvalResult(0, *honest, 2)).ok());  // Took 1 s: the limit is 10 s.
  Pass(s.get(), absl::Seconds(9));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1, 2}));
  Pass(s.get(), absl::Seconds(2));
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
  // Its lease goes to another worker.
  bool found = false;
  for (absl::StatusOr<LeaseResponse> l = s->LeaseWork(EvalRequest(1, 0)); l.ok() && l->lease_id() > 0 && !found;
       l = s->LeaseWork(EvalRequest(1, 0))) {
    found = l->lease_id() == held->lease_id();
    if (!found) {
      ASSERT_TRUE(s->ReportProgress(EvalResult(1, *l, 2)).ok());
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(InsiderTest, EvaluationLeasesAreNotTimedBeforeOneWasReported) {
  auto s = Make(SYNC, 2);
  for (int rank : {0, 1}) ASSERT_TRUE(s->ReportProgress(StepReport(rank, 3)).ok());
  ASSERT_TRUE(s->LeaseWork(EvalRequest(0, 0)).ok());
  Pass(s.get(), absl::Seconds(30));  // A first, slow evaluation: nothing to compare it with.
  EXPECT_EQ(Workers(*s), (std::vector<int>{0, 1}));
}

// Item 11: progress reports claim no more than the scheduler handed out.
TEST_F(InsiderTest, SyncProgressClaimsAreBoundedByTheJobsSteps) {
  auto s = Make(SYNC, 2);  // 3 steps of 20 samples.
  ProgressReport r = StepReport(1, 3);
  r.mutable_train()->set_steps(3);
  r.mutable_train()->set_samples(1000000000);
  absl::Status refused = s->ReportProgress(r);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("1000000000 samples in 3 steps, expected at most 20"));
  r.mutable_train()->set_samples(std::numeric_limits<int64_t>::max());
  r.mutable_train()->set_steps(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(s->ReportProgress(r).code(), absl::StatusCode::kInvalidArgument);
  r.mutable_train()->set_steps(3);
  r.mutable_train()->set_samples(60);
  ASSERT_TRUE(s->ReportProgress(r).ok());
  // The same claim again would be more than the job's 3 steps of 20 samples.
  refused = s->ReportProgress(r);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("120 samples over the job"));
  r.set_step(4);
  EXPECT_EQ(s->ReportProgress(r).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(InsiderTest, AsyncProgressClaimsAreBoundedByTheLeasesHandedOut) {
  auto s = Make(ASYNC, 2);
  ProgressReport r = StepReport(1, 1);
  r.mutable_train()->set_steps(1);
  r.mutable_train()->set_samples(10);
  absl::Status refused = s->ReportProgress(r);  // No lease yet.
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("1 batches over the job, more than the 0 batches"));
  LeaseRequest train;
  train.set_worker_rank(1);
  ASSERT_TRUE(s->LeaseWork(train).ok());  // 2 batches.
  r.mutable_train()->set_samples(11);
  EXPECT_THAT(s->ReportProgress(r).message(), HasSubstr("11 samples in 1 batches, expected at most 10"));
  r.mutable_train()->set_steps(2);
  r.mutable_train()->set_samples(20);
  EXPECT_TRUE(s->ReportProgress(r).ok());
  r.mutable_train()->set_steps(1);
  r.mutable_train()->set_samples(10);
  EXPECT_EQ(s->ReportProgress(r).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain::scheduler

namespace pstrain::scheduler {
namespace {

TEST_F(InsiderTest, ServerReportsHaveLimitsToo) {
  auto s = Make(SYNC, 2);
  CheckpointReport checkpoints;
  checkpoints.set_server_rank(0);
  for (int i = 0; i <= kMaxCheckpointSteps; ++i) checkpoints.add_steps(i);
  EXPECT_THAT(s->ReportCheckpoints(checkpoints).message(), HasSubstr("10001 steps, the limit is 10000"));
  SlowStepReport slow = Slow(1, 1000, {});
  for (int i = 0; i <= kMaxWaitingFor; ++i) slow.add_waiting_for(i);
  EXPECT_EQ(s->ReportSlowStep(slow).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s->SummaryJson(), HasSubstr("\"slow_steps\": [],"));
}

}  // namespace
}  // namespace pstrain::scheduler
