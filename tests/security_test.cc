// Outsiders against a real job secured with mutual TLS and a job token (real pstrain-scheduler and
// pstrain-server processes, real sockets): a client without the job's certificate, with a
// certificate of another CA, or without the token, gets nowhere on any method, and nothing it
// tries changes the job. An insider (the job's certificate and token, registered as a worker of
// its own) can act only as its own rank: as another worker or a server, or with no or a forged
// session credential, every method refuses it, and nothing changes. Roles refuse to listen in
// plaintext beyond loopback, and bad security flags stop a role at once with a message. The job's
// tests run over the server's TCP listener (TLS) and over its same-host unix socket (local
// credentials, no encryption): the token and the sessions hold on both.
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/barriers.h"
#include "transport/grpc_status.h"
#include "transport/job_credentials.h"
#include "scheduler/client/scheduler_client.h"
#include "common/session_credential.h"
#include "transport/session_metadata.h"
#include "transport/transport_security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/played_worker_job.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

std::shared_ptr<const TransportSecurity> Secure(const TransportSecurityOptions& options) {
  auto security = TransportSecurity::Create(options);
  EXPECT_TRUE(security.ok()) << security.status();
  return *security;
}

// A job's per-role credentials in `dir`; the worker's options (what the played worker, and any
// insider with a worker's files, uses), unless `role` says otherwise.
TransportSecurityOptions MakeCredentials(const std::string& dir, CertRole role = CertRole::kWorker) {
  std::filesystem::create_directories(dir);
  absl::StatusOr<JobCredentials> made = MakeJobCredentials(dir);
  EXPECT_TRUE(made.ok()) << made.status();
  return made->For(role);
}

// The same job's options for `role`, next to `worker`'s.
TransportSecurityOptions SameJob(const TransportSecurityOptions& worker, CertRole role) {
  JobCredentials job{std::filesystem::path(worker.ca_file).parent_path().string(), worker.server_name};
  return job.For(role);
}

// Each test runs twice: against the server's TCP listener (mutual TLS), and against its unix
// socket, as a worker on the server's host reaches it (GetParam(): same host; gRPC's local
// credentials, the same token and session checks). The scheduler is reached over TLS either way.
class SecurityTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir(same_host() ? "security-unix" : "security");
    job_ = MakeCredentials(dir_ + "/job");
    // Each role its own certificate: the server's flags come last, so they win over the scheduler's.
    std::vector<std::string> server_flags = TransportSecurityFlags(SameJob(job_, CertRole::kServer));
    if (same_host()) server_flags.push_back("--unix_socket_dir=" + dir_);
    ASSERT_NO_FATAL_FAILURE(
        played_.Start(dir_, TransportSecurityFlags(SameJob(job_, CertRole::kScheduler)), Secure(job_), server_flags));
    view_ = played_.view;
    address_ = played_.address;
    client_ = played_.client.get();
    if (same_host()) ASSERT_THAT(view_.servers(0).local().unix_address(), HasSubstr("/ps.sock"));
    server_stub_ = ServerStub(*Secure(job_));
  }

  bool same_host() const { return GetParam(); }
  // Where this test dials the server: its unix socket on the same host, else its TCP address.
  std::string ServerAddress() const {
    return same_host() ? view_.servers(0).local().unix_address() : view_.servers(0).address();
  }

  void TearDown() override { played_.Finish(); }

  static grpc::ChannelArguments FreshChannel() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // Its own connection and handshake.
    args.SetMaxReceiveMessageSize(-1);
    return args;
  }
  std::unique_ptr<ParameterServer::Stub> ServerStub(const TransportSecurity& security) const {
    return ParameterServer::NewStub(security.NewChannel(ServerAddress(), FreshChannel()));
  }
  std::unique_ptr<Scheduler::Stub> SchedulerStub(const TransportSecurity& security) const {
    return Scheduler::NewStub(security.NewChannel(address_, FreshChannel()));
  }
  // A call's context carrying `session` (none when empty); by default the played worker's own.
  std::unique_ptr<grpc::ClientContext> Context(std::optional<std::string> session = std::nullopt) const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    AttachSession(context.get(), session.value_or(client_->session_credential()));
    return context;
  }

  PushRequest GoodPush(int64_t step, float value) const { return played_.GoodPush(step, value); }

  // Worker 0's pull, at the membership epoch of the current view.
  PullResponse Pull(ParameterServer::Stub* stub, grpc::Status* status) const {
    PullRequest request;
    request.set_membership_epoch(client_->GetClusterView()->membership_epoch());
    PullResponse response;
    *status = stub->Pull(Context().get(), request, &response);
    return response;
  }

  // Every method that acts as a rank, each acting as worker 0 (the played worker) or server 0,
  // through the job's own certificate and token but with `session`: each must fail with `code`
  // and say `text`, and the model, step, membership and job state are what they were.
  void ExpectCannotActAsOthers(const std::string& session, grpc::StatusCode code, const std::string& text) {
    grpc::Status ok;
    PullResponse before = Pull(server_stub_.get(), &ok);
    // A join moved the membership on; the server learns it within a poll or two.
    for (int i = 0; i < 100 && ok.error_code() == grpc::StatusCode::ABORTED; ++i) {
      absl::SleepFor(absl::Milliseconds(100));
      before = Pull(server_stub_.get(), &ok);
    }
    ASSERT_TRUE(ok.ok()) << ok.error_message();
    const ClusterView view_before = *client_->GetClusterView();
    auto expect_refused = [&](const grpc::Status& s, const std::string& method) {
      EXPECT_EQ(s.error_code(), code) << method << ": " << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr(text)) << method;
      EXPECT_THAT(s.error_message(), HasSubstr(method)) << "the message names the method";
    };

    PullRequest pull;
    pull.set_worker_rank(0);
    pull.set_membership_epoch(view_before.membership_epoch());
    pull.set_step(before.step());
    PullResponse pulled;
    expect_refused(server_stub_->Pull(Context(session).get(), pull, &pulled), "Pull");
    PushRequest push = GoodPush(before.step(), 0.1f);
    push.set_membership_epoch(view_before.membership_epoch());
    PushResponse pushed;
    expect_refused(server_stub_->Push(Context(session).get(), push, &pushed), "Push");
    expect_refused(server_stub_->PushPull(Context(session).get(), push, &pulled), "PushPull");
    FinishEpochRequest finish;
    finish.set_worker_rank(0);
    FinishEpochResponse finished;
    expect_refused(server_stub_->FinishEpoch(Context(session).get(), finish, &finished), "FinishEpoch");

    auto scheduler = SchedulerStub(*Secure(job_));
    HeartbeatRequest heartbeat;
    heartbeat.set_role(WORKER);
    HeartbeatResponse heartbeat_response;
    expect_refused(scheduler->Heartbeat(Context(session).get(), heartbeat, &heartbeat_response), "Heartbeat");
    BarrierRequest barrier;
    barrier.set_name("an-insiders-barrier");
    barrier.set_role(WORKER);
    BarrierResponse barrier_response;
    expect_refused(scheduler->Barrier(Context(session).get(), barrier, &barrier_response), "Barrier");
    LeaseRequest lease;
    LeaseResponse lease_response;
    expect_refused(scheduler->LeaseWork(Context(session).get(), lease, &lease_response), "LeaseWork");
    ProgressReport progress;
    progress.set_done(true);
    progress.mutable_train()->set_samples(256);
    ProgressResponse progress_response;
    expect_refused(scheduler->ReportProgress(Context(session).get(), progress, &progress_response), "ReportProgress");
    FailureReport failure;
    failure.set_role(WORKER);
    failure.set_message("an insider says worker 0 failed");
    FailureResponse failure_response;
    expect_refused(scheduler->ReportFailure(Context(session).get(), failure, &failure_response), "ReportFailure");
    LeaveRequest leave;
    leave.set_role(WORKER);
    LeaveResponse leave_response;
    expect_refused(scheduler->Leave(Context(session).get(), leave, &leave_response), "Leave");
    FinalModel model;
    model.set_model_file("not the job's model");
    FinalModelAck model_ack;
    expect_refused(scheduler->SubmitFinalModel(Context(session).get(), model, &model_ack), "SubmitFinalModel");
    ModelDeclaration declaration;
    ModelDeclarationAck declaration_ack;
    expect_refused(scheduler->DeclareModel(Context(session).get(), declaration, &declaration_ack), "DeclareModel");
    CheckpointReport checkpoints;
    checkpoints.add_steps(1000);
    CheckpointAck checkpoints_ack;
    expect_refused(scheduler->ReportCheckpoints(Context(session).get(), checkpoints, &checkpoints_ack),
                   "ReportCheckpoints");
    SlowStepReport slow;
    slow.add_waiting_for(0);
    SlowStepAck slow_ack;
    expect_refused(scheduler->ReportSlowStep(Context(session).get(), slow, &slow_ack), "ReportSlowStep");

    const PullResponse after = Pull(server_stub_.get(), &ok);
    ASSERT_TRUE(ok.ok()) << ok.error_message();
    EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
    const ClusterView view_after = *client_->GetClusterView();
    EXPECT_EQ(view_after.membership_epoch(), view_before.membership_epoch());
    EXPECT_EQ(view_after.workers_size(), view_before.workers_size());
    const JobStatus status = *client_->GetJobStatus();
    EXPECT_EQ(status.state(), RUNNING) << status.failure();
    EXPECT_EQ(status.step(), 0);
  }

  // Every method an outsider might try, through `security`: each must fail with one of `codes`
  // and say `text`, and the model, step and membership are what they were.
  void ExpectShutOut(const TransportSecurity& security, std::vector<grpc::StatusCode> codes, const std::string& text) {
    grpc::Status ok;
    const PullResponse before = Pull(server_stub_.get(), &ok);
    ASSERT_TRUE(ok.ok()) << ok.error_message();
    const ClusterView view_before = *client_->GetClusterView();

    auto expect_refused = [&](const grpc::Status& s, const std::string& method) {
      EXPECT_THAT(s.error_code(), ::testing::AnyOfArray(codes)) << method << ": " << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr(text)) << method;
    };
    auto server = ServerStub(security);
    grpc::Status s;
    Pull(server.get(), &s);
    expect_refused(s, "Pull");
    PushResponse push_response;
    expect_refused(server->Push(Context().get(), GoodPush(before.step(), 0.1f), &push_response), "Push");
    PullResponse pushpull_response;
    expect_refused(server->PushPull(Context().get(), GoodPush(before.step(), 0.1f), &pushpull_response), "PushPull");

    auto scheduler = SchedulerStub(security);
    RegisterRequest join;
    join.set_role(WORKER);
    RegisterResponse registered;
    expect_refused(scheduler->Register(Context().get(), join, &registered), "Register");
    GetClusterViewRequest view_request;
    ClusterView view;
    expect_refused(scheduler->GetClusterView(Context().get(), view_request, &view), "GetClusterView");
    JobStatus job_status;
    expect_refused(scheduler->GetJobStatus(Context().get(), JobStatusRequest(), &job_status), "GetJobStatus");
    FailureReport failure;
    failure.set_role(WORKER);
    failure.set_rank(0);
    failure.set_message("an outsider says rank 0 failed");
    FailureResponse failure_response;
    expect_refused(scheduler->ReportFailure(Context().get(), failure, &failure_response), "ReportFailure");
    LeaveRequest leave;
    leave.set_role(WORKER);
    leave.set_rank(0);
    LeaveResponse leave_response;
    expect_refused(scheduler->Leave(Context().get(), leave, &leave_response), "Leave");

    const PullResponse after = Pull(server_stub_.get(), &ok);
    ASSERT_TRUE(ok.ok()) << ok.error_message();
    EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
    const ClusterView view_after = *client_->GetClusterView();
    EXPECT_EQ(view_after.membership_epoch(), view_before.membership_epoch());
    EXPECT_EQ(view_after.workers_size(), view_before.workers_size());
  }

  std::string dir_;
  TransportSecurityOptions job_;
  PlayedWorkerJob played_;
  std::string address_;
  ClusterView view_;
  SchedulerClient* client_ = nullptr;
  std::unique_ptr<ParameterServer::Stub> server_stub_;
};

TEST_P(SecurityTest, OutsidersGetNowhereAndChangeNothing) {
  if (same_host()) {
    // Plaintext: nothing to hand over a token, so every call to the server's socket is refused
    // before its request is read (the scheduler, over TLS, never completes the handshake).
    ExpectShutOut(*TransportSecurity::Loopback(), {grpc::StatusCode::UNAUTHENTICATED, grpc::StatusCode::UNAVAILABLE},
                  "");
    // No certificate is asked for on the socket: the folder keeps other users out
    // (transport_transport_security_test runs one as uid 65534), the token everyone else.
  } else {
    // Plaintext: the TLS handshake never completes.
    ExpectShutOut(*TransportSecurity::Loopback(), {grpc::StatusCode::UNAVAILABLE}, "");

    // A certificate that another CA signed, even with the job's token.
    TransportSecurityOptions stranger = MakeCredentials(dir_ + "/stranger");
    stranger.token_file = job_.token_file;
    ExpectShutOut(*Secure(stranger), {grpc::StatusCode::UNAVAILABLE}, "");
  }

  // The job's certificate and key (say, copied off a node) without the token, or with another.
  TransportSecurityOptions no_token = job_;
  no_token.token_file.clear();
  ExpectShutOut(*Secure(no_token), {grpc::StatusCode::UNAUTHENTICATED}, "no job token");
  TransportSecurityOptions other_token = job_;
  other_token.token_file = MakeCredentials(dir_ + "/other").token_file;
  ExpectShutOut(*Secure(other_token), {grpc::StatusCode::UNAUTHENTICATED}, "wrong job token");

  // The job itself goes on: its worker's push is applied. SGD, lr 0.5, gradient 0.1.
  grpc::Status s;
  PullResponse before = Pull(server_stub_.get(), &s);
  PushResponse response;
  ASSERT_TRUE(server_stub_->Push(Context().get(), GoodPush(before.step(), 0.1f), &response).ok());
  PullResponse after = Pull(server_stub_.get(), &s);
  EXPECT_EQ(after.step(), before.step() + 1);
  float w_before, w_after;
  std::memcpy(&w_before, before.chunks(0).data().data(), sizeof(float));
  std::memcpy(&w_after, after.chunks(0).data().data(), sizeof(float));
  EXPECT_NEAR(w_after - w_before, -0.05f, 1e-6);
}

TEST_P(SecurityTest, AMemberActsOnlyAsItsOwnRank) {
  // An insider: the job's certificate, key and token, registered as a worker of its own.
  std::unique_ptr<SchedulerClient> insider = *SchedulerClient::Create(address_, absl::Seconds(10), Secure(job_));
  absl::StatusOr<RegisterResponse> joined = insider->Register(WORKER, "", absl::Seconds(10));
  ASSERT_TRUE(joined.ok()) << joined.status();
  ASSERT_NE(joined->rank(), 0);
  const std::string session = insider->session_credential();
  ASSERT_FALSE(session.empty());

  // Its own session, acting as the played worker (worker 0) or as server 0.
  ExpectCannotActAsOthers(session, grpc::StatusCode::PERMISSION_DENIED, "'s session may not act as");
  // No session at all: the job's certificate and token alone act as nobody.
  ExpectCannotActAsOthers("", grpc::StatusCode::UNAUTHENTICATED, "no session credential");
  // A credential for worker 0 that another scheduler signed.
  std::unique_ptr<SessionSigner> other = *SessionSigner::Generate();
  ExpectCannotActAsOthers(other->Sign({WORKER, 0, ""}), grpc::StatusCode::UNAUTHENTICATED, "signature does not verify");
  // Worker 0's credential with its claims altered: still not verified.
  std::string altered = client_->session_credential();
  altered[3] = altered[3] == 'A' ? 'B' : 'A';
  ExpectCannotActAsOthers(altered, grpc::StatusCode::UNAUTHENTICATED, "session credential");

  // As itself it is a worker like any other: it may leave.
  EXPECT_TRUE(insider->Leave(WORKER, joined->rank(), "the test is over").ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, SecurityTest, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "SameHostUnixSocket" : "Tls";
});

// Roles that would listen in plaintext beyond loopback, or whose security flags are wrong, stop
// at once and say why.
TEST(SecurityFlagsTest, RolesRefuseUnsafeListenersAndBadFlags) {
  const std::string dir = MakeTempDir("security-flags");
  TransportSecurityOptions job = MakeCredentials(dir + "/job");
  struct Case {
    std::vector<std::string> argv;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{BinDir() + "/pstrain-scheduler", "--host=0.0.0.0", "--port=0"}, "refusing to listen on 0.0.0.0"},
      {{BinDir() + "/pstrain-server", "--scheduler=127.0.0.1:1", "--host=0.0.0.0", "--advertise_host=127.0.0.1",
        "--startup_timeout_ms=2000"},
       "refusing to listen on 0.0.0.0"},
      {{BinDir() + "/pstrain-scheduler", "--port=0", "--tls_cert=" + job.cert_file}, "needs all of --tls_cert"},
      {{BinDir() + "/pstrain-server", "--scheduler=127.0.0.1:1", "--job_token_file=" + job.token_file},
       "travel in the clear"},
      {{BinDir() + "/pstrain-worker", "--scheduler=127.0.0.1:1", "--tls_cert=" + job.cert_file,
        "--tls_key=" + job.cert_file, "--tls_ca=" + job.ca_file},
       "no private key"},
      {{BinDir() + "/pstrain-launch", "--insecure", "--tls_cert=" + job.cert_file, "--tls_key=" + job.key_file,
        "--tls_ca=" + job.ca_file},
       "contradict"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto child = Child::Start(cases[i].argv, absl::StrCat(dir, "/case", i, ".log"));
    ASSERT_TRUE(child.ok()) << child.status();
    absl::StatusOr<int> code = child->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << cases[i].argv[0];
    EXPECT_NE(*code, 0) << cases[i].argv[0];
    EXPECT_THAT(child->Output(), HasSubstr(cases[i].says)) << cases[i].argv[0];
  }
  // With --insecure the same listener is allowed (the scheduler then waits for roles: stop it).
  auto insecure = Child::Start(
      {BinDir() + "/pstrain-scheduler", "--host=0.0.0.0", "--port=0", "--insecure", "--port_file=" + dir + "/port"},
      dir + "/insecure.log");
  ASSERT_TRUE(insecure.ok());
  std::string port;
  for (int i = 0; i < 200 && port.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    port = std::string(absl::StripAsciiWhitespace(ReadFile(dir + "/port")));
  }
  EXPECT_FALSE(port.empty()) << insecure->Output();
  insecure->Kill(SIGKILL);
}

}  // namespace
}  // namespace pstrain::testing
