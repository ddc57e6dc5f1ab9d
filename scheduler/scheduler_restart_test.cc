// A restarted Scheduler (Scheduler::Restore from its predecessor's Snapshot) goes on with the job:
// every change is persisted before its answer, retried calls count once, and a state of another
// job is refused. The state file's format and its errors are checked here too.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"
#include "scheduler/state_file.h"

namespace pstrain {
namespace scheduler {
namespace {

using test_util::Hb;
using test_util::TinyJobOptions;

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

class SchedulerRestartTest : public ::testing::Test {
 protected:
  // A 1-server, 2-worker job of 100 samples, batch 10, leases of 2 batches; every snapshot goes to
  // saved_ (and persists_ counts them).
  Scheduler::Options Opts(Mode mode) {
    JobSpec job;
    job.set_num_servers(1);
    job.set_num_workers(2);
    job.set_epochs(2);
    job.set_mode(mode);
    job.set_batch_size(10);
    job.set_lease_batches(2);
    Scheduler::Options options = TinyJobOptions(job, 8, 100, 40, 10, [this] { return now_; });
    options.persist = [this](int64_t version, const SchedulerState& state) {
      ++persists_;
      if (!persist_error_.ok()) return persist_error_;
      if (version > saved_version_) {
        saved_version_ = version;
        saved_ = state;
      }
      return absl::OkStatus();
    };
    return options;
  }

  std::unique_ptr<Scheduler> Start(Mode mode) {
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(Opts(mode));
    EXPECT_TRUE(s.ok()) << s.status();
    RegisterRequest r;
    r.set_role(SERVER);
    r.set_address("h:1");
    r.set_instance_id("server");
    EXPECT_TRUE((*s)->Register(r).ok());
    for (int w = 0; w < 2; ++w) {
      r.set_role(WORKER);
      r.set_address("");
      r.set_instance_id(absl::StrCat("worker", w));
      EXPECT_TRUE((*s)->Register(r).ok());
    }
    EXPECT_EQ((*s)->state(), RUNNING);
    return std::move(s).value();
  }

  // The scheduler a restart makes from the last saved state.
  std::unique_ptr<Scheduler> Restart(Mode mode) {
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Restore(Opts(mode), saved_);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(s).value();
  }

  static LeaseRequest Lease(int rank, int epoch, int64_t seq) {
    LeaseRequest r;
    r.set_worker_rank(rank);
    r.set_epoch(epoch);
    r.set_request_seq(seq);
    return r;
  }

  static ProgressReport LeaseDone(int rank, const LeaseResponse& lease, int64_t seq) {
    ProgressReport r;
    r.set_worker_rank(rank);
    r.set_report_seq(seq);
    LeaseProgress* p = r.add_leases();
    p->set_lease_id(lease.lease_id());
    p->set_batches_done(2);
    r.mutable_train()->set_samples(lease.end() - lease.begin());
    r.mutable_train()->set_steps(2);
    r.mutable_train()->set_loss_sum(1.0);
    return r;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  SchedulerState saved_;
  int64_t saved_version_ = 0;
  int persists_ = 0;
  absl::Status persist_error_;
};

TEST_F(SchedulerRestartTest, AFailureQuotingBytesThatAreNotUtf8StillSavesAParsableState) {
  std::unique_ptr<Scheduler> s = Start(SYNC);
  // A reason quoting a peer's bytes (a tensor name, say) that are not UTF-8.
  s->Fail(absl::InvalidArgumentError("bad tensor name '\xff\xfe'"));
  ASSERT_EQ(saved_.state(), FAILED);
  SchedulerState reparsed;
  ASSERT_TRUE(reparsed.ParseFromString(saved_.SerializeAsString())) << "the saved state does not parse";
  EXPECT_NE(reparsed.failure().find("\\xff\\xfe"), std::string::npos) << reparsed.failure();
  std::unique_ptr<Scheduler> restarted = Restart(SYNC);
  EXPECT_EQ(restarted->state(), FAILED);
}

TEST_F(SchedulerRestartTest, WorkersFailureMessagesOutliveARestart) {
  std::unique_ptr<Scheduler> s = Start(ASYNC);
  FailureReport f;
  f.set_role(WORKER);
  f.set_rank(1);
  f.set_message("cannot read the data");
  s->ReportFailure(f);
  ASSERT_EQ(s->state(), RUNNING);
  ASSERT_EQ(saved_.worker_failures_size(), 1);
  std::unique_ptr<Scheduler> r = Restart(ASYNC);
  EXPECT_THAT(r->SummaryJson(), HasSubstr("\"worker_failures\": [\"worker 1 failed: cannot read the data\"]"));
  // What a later failure quotes too: the restarted scheduler knows the earlier one.
  f.set_rank(0);
  f.set_message("out of memory");
  r->ReportFailure(f);
  EXPECT_THAT(r->SummaryJson(), HasSubstr("cannot read the data\", \"worker 0 failed: out of memory\"]"));
  EXPECT_EQ(r->Snapshot().worker_failures_size(), 2);
}

TEST_F(SchedulerRestartTest, RestoredSchedulerHasTheSameStateAndGoesOn) {
  std::unique_ptr<Scheduler> s = Start(ASYNC);
  absl::StatusOr<LeaseResponse> a = s->LeaseWork(Lease(0, 0, 1));
  absl::StatusOr<LeaseResponse> b = s->LeaseWork(Lease(1, 0, 1));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(s->ReportProgress(LeaseDone(0, *a, 2)).ok());
  BarrierRequest barrier;
  barrier.set_name("servers-ready");
  barrier.set_participants(BarrierRequest::ALL);
  for (auto [role, rank] : std::vector<std::pair<Role, int>>{{SERVER, 0}, {WORKER, 0}, {WORKER, 1}}) {
    barrier.set_role(role);
    barrier.set_rank(rank);
    s->Barrier(barrier, [](absl::Status) {});
  }
  const SchedulerState before = s->Snapshot();
  EXPECT_TRUE(MessageDifferencer::Equals(saved_, before));  // Every change was saved.

  now_ += absl::Seconds(30);
  std::unique_ptr<Scheduler> r = Restart(ASYNC);
  SchedulerState after = r->Snapshot();
  EXPECT_EQ(after.restarts(), 1);
  after.set_restarts(0);
  EXPECT_TRUE(MessageDifferencer::Equals(after, before));
  EXPECT_EQ(r->View().membership_epoch(), s->View().membership_epoch());  // No bump for a restart.
  EXPECT_EQ(r->state(), RUNNING);

  // The released barrier answers at once; the lease pool goes on where it was.
  absl::Status answer = absl::UnknownError("not answered");
  barrier.set_role(WORKER);
  barrier.set_rank(1);
  r->Barrier(barrier, [&](absl::Status status) { answer = status; });
  EXPECT_TRUE(answer.ok()) << answer;
  absl::StatusOr<LeaseResponse> c = r->LeaseWork(Lease(0, 0, 3));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->lease_id(), 3);
  EXPECT_EQ(c->begin(), 40);
}

TEST_F(SchedulerRestartTest, ChangesPersistBeforeTheAnswerAndHeartbeatsDoNot) {
  std::unique_ptr<Scheduler> s = Start(SYNC);
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());  // The first one persists: the watch starts.
  const int after_start = persists_;
  EXPECT_TRUE(saved_.membership().workers(0).heard());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  s->CheckHealth();
  EXPECT_EQ(persists_, after_start);
  ProgressReport report;
  report.set_worker_rank(0);
  report.set_step(2);
  report.mutable_train()->set_steps(2);
  report.set_report_seq(1);
  persist_error_ = absl::InternalError("disk full");
  const absl::Status refused = s->ReportProgress(report);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("disk full"), std::string::npos);
  persist_error_ = absl::OkStatus();
  // The retry saves what the first attempt changed, and counts nothing twice.
  ASSERT_TRUE(s->ReportProgress(report).ok());
  EXPECT_EQ(saved_.progress().max_step(), 2);
  EXPECT_EQ(s->Status().step(), 2);
}

TEST_F(SchedulerRestartTest, ARetriedProgressReportIsNotCountedTwice) {
  std::unique_ptr<Scheduler> s = Start(ASYNC);
  absl::StatusOr<LeaseResponse> a = s->LeaseWork(Lease(0, 0, 1));
  ASSERT_TRUE(a.ok());
  const ProgressReport report = LeaseDone(0, *a, 2);
  ASSERT_TRUE(s->ReportProgress(report).ok());
  // The answer was lost: the scheduler restarted, and the worker sends the same report again.
  std::unique_ptr<Scheduler> r = Restart(ASYNC);
  ASSERT_TRUE(r->ReportProgress(report).ok());
  ASSERT_TRUE(r->ReportProgress(report).ok());
  EXPECT_EQ(r->Status().step(), 2);  // Batches trained: one report's worth.
  EXPECT_NE(r->SummaryJson().find("{\"rank\": 0, \"samples\": 20, "), std::string::npos) << r->SummaryJson();
}

TEST_F(SchedulerRestartTest, ARetriedLeaseRequestGetsTheSameLeaseAgain) {
  std::unique_ptr<Scheduler> s = Start(ASYNC);
  absl::StatusOr<LeaseResponse> first = s->LeaseWork(Lease(0, 0, 7));
  ASSERT_TRUE(first.ok());
  std::unique_ptr<Scheduler> r = Restart(ASYNC);
  absl::StatusOr<LeaseResponse> again = r->LeaseWork(Lease(0, 0, 7));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*again, *first));
  EXPECT_EQ(r->LeaseWork(Lease(0, 0, 6)).status().code(), absl::StatusCode::kAborted);
  absl::StatusOr<LeaseResponse> next = r->LeaseWork(Lease(0, 0, 8));
  ASSERT_TRUE(next.ok());
  EXPECT_NE(next->lease_id(), first->lease_id());
  // The same for evaluation leases: one lost answer must not keep an evaluation lease out forever.
  LeaseRequest eval = Lease(1, 0, 1);
  eval.set_eval(true);
  absl::StatusOr<LeaseResponse> e1 = r->LeaseWork(eval);
  absl::StatusOr<LeaseResponse> e2 = r->LeaseWork(eval);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(e1->lease_id(), e2->lease_id());
  eval.set_epoch(1);
  EXPECT_EQ(r->LeaseWork(eval).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerRestartTest, LiveRolesGetAFreshGracePeriodFromTheRestart) {
  std::unique_ptr<Scheduler> s = Start(SYNC);
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 0)).ok());
  ASSERT_TRUE(s->Heartbeat(Hb(WORKER, 1)).ok());
  now_ += absl::Seconds(20);  // The scheduler was down for 20 s.
  std::unique_ptr<Scheduler> r = Restart(SYNC);
  now_ += absl::Seconds(2);
  r->CheckHealth();
  EXPECT_EQ(r->state(), RUNNING);
  ASSERT_TRUE(r->Heartbeat(Hb(SERVER, 0)).ok());
  ASSERT_TRUE(r->Heartbeat(Hb(WORKER, 0)).ok());
  now_ += absl::Seconds(2);  // Worker 1 never came back: dead 3 s after the restart.
  r->CheckHealth();
  EXPECT_EQ(r->View().workers_size(), 1);
  EXPECT_EQ(r->View().membership_epoch(), s->View().membership_epoch() + 1);
}

TEST_F(SchedulerRestartTest, AStateOfAnotherJobIsRefused) {
  std::unique_ptr<Scheduler> s = Start(SYNC);
  Scheduler::Options other = Opts(SYNC);
  other.job.set_epochs(5);
  absl::StatusOr<std::unique_ptr<Scheduler>> r = Scheduler::Restore(other, saved_);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("epochs: 2 -> 5"), std::string::npos) << r.status();
  Scheduler::Options more_data = Opts(SYNC);
  more_data.train_samples = 200;
  r = Scheduler::Restore(more_data, saved_);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("data changed"), std::string::npos) << r.status();
}

TEST_F(SchedulerRestartTest, AFinishedJobStaysFinished) {
  std::unique_ptr<Scheduler> s = Start(SYNC);
  s->Fail(absl::UnavailableError("server 0 died"));
  std::unique_ptr<Scheduler> r = Restart(SYNC);
  EXPECT_EQ(r->state(), FAILED);
  EXPECT_EQ(r->failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r->failure().message(), "server 0 died");
  EXPECT_FALSE(r->ServersKnowTheEnd());  // Not until a server heartbeats to the new scheduler.
  now_ += absl::Milliseconds(1);
  ASSERT_TRUE(r->Heartbeat(Hb(SERVER, 0)).ok());
  EXPECT_TRUE(r->ServersKnowTheEnd());
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

TEST(StateFileTest, SavesAndLoadsAndSkipsWhatDidNotChange) {
  std::filesystem::remove_all(TempPath("state-roundtrip"));
  absl::StatusOr<std::unique_ptr<StateFile>> file = StateFile::Open(TempPath("state-roundtrip/sub"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE((*file)->Load()->has_value());  // A fresh job.
  SchedulerState state;
  state.mutable_job()->set_epochs(3);
  state.set_port(4567);
  ASSERT_TRUE((*file)->Save(1, state).ok());
  ASSERT_TRUE((*file)->Save(2, state).ok());  // Same bytes: not written again.
  SchedulerState older;
  ASSERT_TRUE((*file)->Save(1, older).ok());  // Older than what is saved: skipped.
  EXPECT_EQ((*file)->writes(), 1);
  absl::StatusOr<std::optional<SchedulerState>> loaded = (*file)->Load();
  ASSERT_TRUE(loaded.ok() && loaded->has_value()) << loaded.status();
  EXPECT_TRUE(MessageDifferencer::Equals(**loaded, state));
}

TEST(StateFileTest, DamagedFilesGivePreciseErrors) {
  SchedulerState state;
  state.mutable_job()->set_epochs(3);
  const std::string good = EncodeSchedulerState(state);
  ASSERT_TRUE(DecodeSchedulerState(good, "f").ok());

  std::string flipped = good;
  flipped[22] ^= 1;
  absl::Status s = DecodeSchedulerState(flipped, "f").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;

  s = DecodeSchedulerState(good.substr(0, good.size() - 3), "f").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;

  s = DecodeSchedulerState("PSTRAIN", "f").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("expected at least 24"), std::string::npos) << s;

  std::string magic = good;
  magic[0] = 'X';
  s = DecodeSchedulerState(magic, "f").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s;

  std::string version = good;
  version[8] = 9;
  s = DecodeSchedulerState(version, "f").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("format version 9"), std::string::npos) << s;
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
