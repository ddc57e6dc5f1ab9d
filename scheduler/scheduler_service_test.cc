// The Scheduler service over a real gRPC server on 127.0.0.1.
#include "scheduler/scheduler_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "transport/session_metadata.h"
#include "gtest/gtest.h"
#include "scheduler/shard_map.h"

namespace pstrain {
namespace scheduler {
namespace {

class SchedulerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobSpec job;
    job.set_num_servers(1);
    job.set_num_workers(1);
    ApplyJobDefaults(&job);
    TensorSpec t;
    t.set_name("w");
    t.add_shape(4);
    t.set_num_elements(4);
    Scheduler::Options options;
    options.job = job;
    options.shard_map = *BuildShardMap({t}, 1, 1024);
    options.train_samples = 100;
    options.test_samples = 10;
    options.total_steps = 20;
    core_ = *Scheduler::Create(options);
    service_ = std::make_unique<SchedulerService>(core_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = pstrain::Scheduler::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    // Parked calls must be answered before the server can shut down.
    core_->Fail(absl::CancelledError("test over"));
    server_->Shutdown();
  }

  static void SetDeadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  }

  int Register(Role role, const std::string& address) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    RegisterRequest req;
    req.set_role(role);
    req.set_address(address);
    RegisterResponse resp;
    grpc::Status s = stub_->Register(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    absl::MutexLock lock(&mu_);
    credentials_[{role, resp.rank()}] = resp.session_credential();
    return resp.rank();
  }

  // SetDeadline, and the session credential `role` `rank` registered with.
  void As(grpc::ClientContext* ctx, Role role, int rank) {
    SetDeadline(ctx);
    absl::MutexLock lock(&mu_);
    AttachSession(ctx, credentials_[{role, rank}]);
  }

  absl::Mutex mu_;
  std::map<std::pair<Role, int>, std::string> credentials_ ABSL_GUARDED_BY(mu_);

  // Starts a blocking call on another thread; the future holds its status.
  template <typename Call>
  std::future<grpc::Status> Async(Call call) {
    return std::async(std::launch::async, call);
  }

  static bool Pending(std::future<grpc::Status>& f) {
    return f.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout;
  }

  std::unique_ptr<Scheduler> core_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pstrain::Scheduler::Stub> stub_;
};

TEST_F(SchedulerServiceTest, ClusterViewWaitReleasesWhenEveryoneRegistered) {
  ClusterView view;
  auto waiting = Async([&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    GetClusterViewRequest req;
    req.set_wait_until_running(true);
    return stub_->GetClusterView(&ctx, req, &view);
  });
  EXPECT_EQ(Register(SERVER, "127.0.0.1:4001"), 0);
  EXPECT_TRUE(Pending(waiting));
  EXPECT_EQ(Register(WORKER, "127.0.0.1:5001"), 0);
  grpc::Status status = waiting.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(view.state(), RUNNING);
  ASSERT_EQ(view.servers_size(), 1);
  EXPECT_EQ(view.servers(0).address(), "127.0.0.1:4001");
  ASSERT_EQ(view.workers_size(), 1);
  EXPECT_EQ(view.shard_map().chunks_size(), 1);
  EXPECT_EQ(view.train_samples(), 100);
  EXPECT_EQ(view.total_steps(), 20);

  // Without waiting, the view comes at once.
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ClusterView now;
  ASSERT_TRUE(stub_->GetClusterView(&ctx, GetClusterViewRequest(), &now).ok());
  EXPECT_EQ(now.membership_epoch(), view.membership_epoch());
}

TEST_F(SchedulerServiceTest, BarrierReleasesWhenBothEnter) {
  Register(SERVER, "127.0.0.1:4001");
  Register(WORKER, "127.0.0.1:5001");
  auto enter = [this](Role role) {
    return Async([this, role] {
      grpc::ClientContext ctx;
      As(&ctx, role, 0);
      BarrierRequest req;
      req.set_name("servers-ready");
      req.set_participants(BarrierRequest::ALL);
      req.set_role(role);
      req.set_rank(0);
      BarrierResponse resp;
      return stub_->Barrier(&ctx, req, &resp);
    });
  };
  auto server = enter(SERVER);
  EXPECT_TRUE(Pending(server));
  auto worker = enter(WORKER);
  grpc::Status a = server.get(), b = worker.get();
  EXPECT_TRUE(a.ok()) << a.error_message();
  EXPECT_TRUE(b.ok()) << b.error_message();
}

TEST_F(SchedulerServiceTest, ReportFailureAbortsParkedCalls) {
  Register(SERVER, "127.0.0.1:4001");
  ClusterView view;
  auto waiting = Async([&] {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    GetClusterViewRequest req;
    req.set_wait_until_running(true);
    return stub_->GetClusterView(&ctx, req, &view);
  });
  auto barrier = Async([&] {
    grpc::ClientContext ctx;
    As(&ctx, SERVER, 0);
    BarrierRequest req;
    req.set_name("servers-ready");
    req.set_participants(BarrierRequest::ALL);
    req.set_role(SERVER);
    BarrierResponse resp;
    return stub_->Barrier(&ctx, req, &resp);
  });
  EXPECT_TRUE(Pending(waiting));
  EXPECT_TRUE(Pending(barrier));

  grpc::ClientContext ctx;
  As(&ctx, SERVER, 0);
  FailureReport report;
  report.set_role(SERVER);
  report.set_rank(0);
  report.set_message("disk full");
  FailureResponse resp;
  ASSERT_TRUE(stub_->ReportFailure(&ctx, report, &resp).ok());

  grpc::Status a = waiting.get(), b = barrier.get();
  EXPECT_EQ(a.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(a.error_message(), "job failed: server 0 at 127.0.0.1:4001: disk full");
  EXPECT_EQ(b.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(b.error_message(), a.error_message());

  grpc::ClientContext hb_ctx;
  As(&hb_ctx, SERVER, 0);
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  HeartbeatResponse hb_resp;
  ASSERT_TRUE(stub_->Heartbeat(&hb_ctx, hb, &hb_resp).ok());
  EXPECT_EQ(hb_resp.state(), FAILED);
  EXPECT_EQ(hb_resp.failure(), "server 0 at 127.0.0.1:4001: disk full");

  grpc::ClientContext st_ctx;
  SetDeadline(&st_ctx);
  JobStatus status;
  ASSERT_TRUE(stub_->GetJobStatus(&st_ctx, JobStatusRequest(), &status).ok());
  EXPECT_EQ(status.state(), FAILED);
  EXPECT_EQ(status.registered_servers(), 1);
  EXPECT_EQ(status.registered_workers(), 0);
}

TEST_F(SchedulerServiceTest, ErrorsTravelWithTheirCodes) {
  Register(SERVER, "127.0.0.1:4001");
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  RegisterRequest req;
  req.set_role(SERVER);
  req.set_address("127.0.0.1:4002");
  RegisterResponse resp;
  grpc::Status s = stub_->Register(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("job already has 1 servers"), std::string::npos) << s.error_message();
}

TEST_F(SchedulerServiceTest, ReportCheckpointsIsCheckedAndAnswered) {
  Register(SERVER, "127.0.0.1:4001");
  for (const std::vector<int64_t>& steps : {std::vector<int64_t>{10, 20}, std::vector<int64_t>{20, 10}}) {
    grpc::ClientContext ctx;
    As(&ctx, SERVER, 0);
    CheckpointReport req;
    req.set_server_rank(0);
    for (int64_t step : steps) req.add_steps(step);
    CheckpointAck resp;
    grpc::Status s = stub_->ReportCheckpoints(&ctx, req, &resp);
    if (steps.front() == 10) {
      EXPECT_TRUE(s.ok()) << s.error_message();
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    }
  }
  grpc::ClientContext ctx;
  As(&ctx, SERVER, 0);
  CheckpointReport req;
  req.set_server_rank(3);
  CheckpointAck resp;
  EXPECT_EQ(stub_->ReportCheckpoints(&ctx, req, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SchedulerServiceTest, LeaveRemovesTheWorkerAndItsHeartbeatsAreRefused) {
  Register(SERVER, "127.0.0.1:4001");
  Register(WORKER, "127.0.0.1:5001");
  const int64_t epoch = core_->View().membership_epoch();
  for (int attempt = 0; attempt < 2; ++attempt) {  // Idempotent.
    grpc::ClientContext ctx;
    As(&ctx, WORKER, 0);
    LeaveRequest req;
    req.set_role(WORKER);
    req.set_rank(0);
    req.set_reason("asked to stop (SIGTERM)");
    LeaveResponse resp;
    grpc::Status s = stub_->Leave(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  // min_workers is 1 and the only worker left: the job fails, with the reason.
  EXPECT_EQ(core_->View().membership_epoch(), epoch + 1);
  EXPECT_EQ(core_->state(), FAILED);
  EXPECT_NE(std::string(core_->failure().message())
                .find("only 0 live workers left; the job needs at least 1 (--min_workers); worker 0 at "
                      "127.0.0.1:5001 left: asked to stop (SIGTERM)"),
            std::string::npos)
      << core_->failure();

  grpc::ClientContext hb_ctx;
  As(&hb_ctx, WORKER, 0);
  HeartbeatRequest hb;
  hb.set_role(WORKER);
  hb.set_rank(0);
  HeartbeatResponse hb_resp;
  grpc::Status s = stub_->Heartbeat(&hb_ctx, hb, &hb_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message().substr(0, 30), "worker 0 is no longer a member") << s.error_message();
}

// Every method that acts as a rank, called without a credential, with a forged one, and with a
// real one for another rank or role: refused with the precise code, and the core never sees it.
TEST_F(SchedulerServiceTest, CallsActOnlyAsTheRankTheirSessionNames) {
  Register(SERVER, "127.0.0.1:4001");
  Register(WORKER, "127.0.0.1:5001");
  const int64_t epoch = core_->View().membership_epoch();
  const std::string forged = (*SessionSigner::Generate())->Sign({WORKER, 0, ""});
  struct Attempt {
    std::string credential;
    grpc::StatusCode code;
    std::string message;
  };
  std::string worker0, server0;
  {
    absl::MutexLock lock(&mu_);
    worker0 = credentials_[{WORKER, 0}];
    server0 = credentials_[{SERVER, 0}];
  }
  const std::vector<Attempt> attempts = {
      {"", grpc::StatusCode::UNAUTHENTICATED, "Leave: no session credential"},
      {forged, grpc::StatusCode::UNAUTHENTICATED, "Leave: session credential: the signature does not verify"},
      {server0, grpc::StatusCode::PERMISSION_DENIED, "Leave: server 0's session may not act as worker 0"},
  };
  for (const Attempt& a : attempts) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    AttachSession(&ctx, a.credential);
    LeaveRequest req;
    req.set_role(WORKER);
    req.set_rank(0);
    LeaveResponse resp;
    grpc::Status s = stub_->Leave(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), a.code) << s.error_message();
    EXPECT_EQ(s.error_message().substr(0, a.message.size()), a.message) << s.error_message();
  }
  // A worker may not report as a server, nor as another worker.
  grpc::ClientContext slow_ctx;
  SetDeadline(&slow_ctx);
  AttachSession(&slow_ctx, worker0);
  SlowStepReport slow;
  slow.set_server_rank(0);
  SlowStepAck slow_ack;
  grpc::Status s = stub_->ReportSlowStep(&slow_ctx, slow, &slow_ack);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), "ReportSlowStep: worker 0's session may not act as server 0");
  grpc::ClientContext progress_ctx;
  SetDeadline(&progress_ctx);
  AttachSession(&progress_ctx, worker0);
  ProgressReport progress;
  progress.set_worker_rank(1);
  ProgressResponse progress_ack;
  EXPECT_EQ(stub_->ReportProgress(&progress_ctx, progress, &progress_ack).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  EXPECT_EQ(core_->View().membership_epoch(), epoch);
  EXPECT_EQ(core_->View().workers_size(), 1);
  EXPECT_NE(core_->state(), FAILED);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
