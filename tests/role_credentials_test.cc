// Per-role credentials (transport/peer_role.h) in a real secured job: scheduler, server and workers
// are processes on 127.0.0.1 with mutual TLS, the job token and each its own certificate. An
// insider holding one role's files (the worker's, say, copied off a node) tries to act as
// another role over TCP: the scheduler refuses it, and the job goes on and finishes as if nothing
// happened.
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/job_credentials.h"
#include "scheduler/client/scheduler_client.h"
#include "transport/transport_security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/session_metadata.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/played_worker_job.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const TransportSecurity> Secure(const TransportSecurityOptions& options) {
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> security = TransportSecurity::Create(options);
  EXPECT_TRUE(security.ok()) << security.status();
  return security.ok() ? *security : TransportSecurity::Loopback();
}

// GET `path` from the scheduler's HTTP port: the body, or "" on failure.
std::string HttpGet(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  httplib::Result res = client.Get(path);
  EXPECT_TRUE(res) << path << ": " << httplib::to_string(res.error());
  if (!res) return "";
  EXPECT_EQ(res->status, 200) << path;
  return res->body;
}

// A Register over a fresh TLS connection made with `security`, as `role` at `address`.
grpc::Status RegisterAs(const TransportSecurity& security, const std::string& scheduler, Role role,
                        const std::string& address, const std::string& metrics_address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // Its own connection and handshake.
  auto stub = Scheduler::NewStub(security.NewChannel(scheduler, args));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  RegisterRequest request;
  request.set_role(role);
  request.set_address(address);
  request.set_metrics_address(metrics_address);
  request.set_instance_id(absl::StrCat("role-credentials-test-", getpid()));
  RegisterResponse response;
  return stub->Register(&context, request, &response);
}

TEST(RoleCredentialsTest, AWorkerCertificateCannotRegisterAServerAndTheJobFinishes) {
  ManualCluster cluster("role-credentials");
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(cluster.dir());
  ASSERT_TRUE(job.ok()) << job.status();
  auto secured = [&job](CertRole role, std::vector<std::string> flags) {
    for (std::string& flag : TransportSecurityFlags(job->For(role))) flags.push_back(std::move(flag));
    return flags;
  };
  const int http_port = FreeLoopbackPort();
  // Two epochs of 12k samples: long enough (several seconds) for the insider to try everything
  // while the job runs. No unix sockets: the insider and the workers reach the server over TCP.
  cluster.Start(
      /*servers=*/1, /*workers=*/2,
      secured(CertRole::kScheduler, {"--http_port=" + std::to_string(http_port), "--epochs=2", "--train_limit=12000",
                                     "--test_limit=500", "--batch_size=16", "--eval_last_epoch_only"}),
      secured(CertRole::kServer, {"--metrics_port=-1", "--metrics_host=127.0.0.1"}), secured(CertRole::kWorker, {}));

  // The operator's credentials see the job (GetJobStatus acts as nobody) but act as no member.
  auto operator_client =
      SchedulerClient::Create(cluster.address, absl::Seconds(5), Secure(job->For(CertRole::kOperator)));
  ASSERT_TRUE(operator_client.ok()) << operator_client.status();
  absl::StatusOr<ClusterView> view = (*operator_client)->WaitUntilRunning(absl::Seconds(60));
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->servers_size(), 1);
  const std::string server0 = view->servers(0).address();
  const std::string targets_before = HttpGet(http_port, "/api/targets");
  ASSERT_THAT(targets_before, HasSubstr("127.0.0.1")) << "the server's metrics should be listed";

  // The probe's attack: a worker's certificate and token register a server at server 0's address,
  // with a metrics address of the insider's choosing.
  const std::string evil_metrics = "127.0.0.1:9";
  grpc::Status as_server =
      RegisterAs(*Secure(job->For(CertRole::kWorker)), cluster.address, SERVER, server0, evil_metrics);
  EXPECT_EQ(as_server.error_code(), grpc::StatusCode::PERMISSION_DENIED) << as_server.error_message();
  EXPECT_EQ(as_server.error_message(),
            "Register as server: the peer's certificate is for role worker; a server needs the job's server "
            "certificate (--tls_cert)");
  // Nor does the operator's certificate, or the scheduler's.
  for (CertRole role : {CertRole::kOperator, CertRole::kScheduler}) {
    grpc::Status refused = RegisterAs(*Secure(job->For(role)), cluster.address, SERVER, server0, evil_metrics);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << CertRoleName(role);
    EXPECT_THAT(refused.error_message(), HasSubstr(absl::StrCat("certificate is for role ", CertRoleName(role))));
  }
  // A server's certificate cannot join as a worker either.
  grpc::Status as_worker = RegisterAs(*Secure(job->For(CertRole::kServer)), cluster.address, WORKER, "", "");
  EXPECT_EQ(as_worker.error_code(), grpc::StatusCode::PERMISSION_DENIED) << as_worker.error_message();
  EXPECT_THAT(as_worker.error_message(), HasSubstr("Register as worker: the peer's certificate is for role server"));
  // A server certificate of another job's CA, with this job's token: the handshake fails.
  const std::string stranger_dir = cluster.dir() + "/stranger";
  std::filesystem::create_directories(stranger_dir);
  absl::StatusOr<JobCredentials> stranger = MakeJobCredentials(stranger_dir);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  TransportSecurityOptions stranger_server = stranger->For(CertRole::kServer);
  stranger_server.token_file = job->For(CertRole::kServer).token_file;
  grpc::Status foreign = RegisterAs(*Secure(stranger_server), cluster.address, SERVER, server0, evil_metrics);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::UNAVAILABLE) << foreign.error_message();

  // Only the operator's certificate may ask for another server count (pstrain-ctl scale); this job
  // then refuses it on its merits (no checkpoints to cut over through).
  for (CertRole role : {CertRole::kWorker, CertRole::kServer, CertRole::kScheduler}) {
    auto member = SchedulerClient::Create(cluster.address, absl::Seconds(5), Secure(job->For(role)));
    ASSERT_TRUE(member.ok()) << member.status();
    absl::StatusOr<ScaleResponse> refused = (*member)->Scale(2);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << CertRoleName(role);
    EXPECT_THAT(refused.status().message(),
                HasSubstr(absl::StrCat("Scale: the peer's certificate is for role ", CertRoleName(role))));
  }
  absl::StatusOr<ScaleResponse> by_operator = (*operator_client)->Scale(2);
  EXPECT_EQ(by_operator.status().code(), absl::StatusCode::kFailedPrecondition) << by_operator.status();
  EXPECT_THAT(by_operator.status().message(), HasSubstr("the job writes no checkpoints"));

  // Nothing changed: one server, the same one, and the same scrape targets.
  absl::StatusOr<ClusterView> after = (*operator_client)->GetClusterView();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->membership_epoch(), view->membership_epoch());
  ASSERT_EQ(after->servers_size(), 1);
  EXPECT_EQ(after->servers(0).address(), server0);
  const std::string targets_after = HttpGet(http_port, "/api/targets");
  EXPECT_EQ(targets_after, targets_before);
  EXPECT_THAT(targets_after, ::testing::Not(HasSubstr(evil_metrics)));

  // The job finishes normally.
  const std::string summary = RunToEnd(cluster);
  EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
  for (auto& server : cluster.servers) {
    absl::StatusOr<int> code = server->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << server->Output();
  }
}

// Servers fetch the parts of a cut from each other over mutual TLS (ShardTransfer): an added
// server with a checkpoint folder of its own restores the change's cut from the two old servers,
// each checking that the caller is a server (its certificate and its session), and the job
// finishes. A caller without a server's session gets nothing, whatever certificate it holds.
TEST(RoleCredentialsTest, ServersFetchThePartsOfACutFromEachOtherOverMutualTls) {
  ManualCluster cluster("role-credentials-transfer");
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(cluster.dir());
  ASSERT_TRUE(job.ok()) << job.status();
  auto secured = [&job](CertRole role, std::vector<std::string> flags) {
    for (std::string& flag : TransportSecurityFlags(job->For(role))) flags.push_back(std::move(flag));
    return flags;
  };
  cluster.Start(/*servers=*/2, /*workers=*/2,
                secured(CertRole::kScheduler, {"--epochs=8", "--train_limit=12000", "--test_limit=500",
                                               "--batch_size=32", "--checkpoint_dir=" + cluster.dir() + "/ckpt",
                                               "--checkpoint_every_steps=25", "--eval_last_epoch_only"}),
                secured(CertRole::kServer, {}), secured(CertRole::kWorker, {}));
  auto operator_client =
      SchedulerClient::Create(cluster.address, absl::Seconds(5), Secure(job->For(CertRole::kOperator)));
  ASSERT_TRUE(operator_client.ok()) << operator_client.status();
  absl::StatusOr<ClusterView> view = (*operator_client)->WaitUntilRunning(absl::Seconds(60));
  ASSERT_TRUE(view.ok()) << view.status();
  // Training: the servers serve (and check sessions).
  const absl::Time end = absl::Now() + absl::Seconds(60);
  int64_t step = 0;
  while (step < 20 && absl::Now() < end) {
    absl::StatusOr<JobStatus> status = (*operator_client)->GetJobStatus();
    if (status.ok()) step = status->step();
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_GE(step, 20);

  // No session, a worker's or a server's certificate: refused before anything is read.
  for (CertRole role : {CertRole::kWorker, CertRole::kServer}) {
    auto stub =
        ShardTransfer::NewStub(Secure(job->For(role))->NewChannel(view->servers(0).address(), {}, CertRole::kServer));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    CutPartRequest request;
    CutPartResponse response;
    const grpc::Status refused = stub->FetchCutPart(&context, request, &response);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << CertRoleName(role) << ": " << refused.error_message();
  }

  absl::StatusOr<ScaleResponse> up = (*operator_client)->Scale(3);
  ASSERT_TRUE(up.ok()) << up.status();
  const std::string own = cluster.dir() + "/server-2-folder";
  std::filesystem::create_directories(own);
  cluster.AddServer(secured(CertRole::kServer, {"--checkpoint_dir=" + own}));
  const std::string summary = RunToEnd(cluster);
  EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
  EXPECT_THAT(summary, HasSubstr("{\"from\":2,\"to\":3,")) << summary;
  EXPECT_THAT(cluster.servers[2]->Output(), HasSubstr("fetched the parts of 2 old servers from them"));
}

// A session is not enough: the certificate must be its role's too. With worker 0's own session (a
// bearer token, say copied off the wire) but another role's certificate, the server serves
// nothing and the scheduler takes no heartbeat; with the worker's certificate both answer.
TEST(RoleCredentialsTest, AWorkersSessionNeedsTheWorkerCertificate) {
  const std::string dir = MakeTempDir("role-credentials-session");
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(dir);
  ASSERT_TRUE(job.ok()) << job.status();
  PlayedWorkerJob played;
  // The server's flags come after the scheduler's, so its own certificate wins.
  ASSERT_NO_FATAL_FAILURE(played.Start(dir, TransportSecurityFlags(job->For(CertRole::kScheduler)),
                                       Secure(job->For(CertRole::kWorker)),
                                       TransportSecurityFlags(job->For(CertRole::kServer))));
  const std::string session = played.client->session_credential();
  auto call_with = [&](CertRole role, grpc::Status* pulled, grpc::Status* heartbeat) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto security = Secure(job->For(role));
    auto server = ParameterServer::NewStub(security->NewChannel(played.view.servers(0).address(), args));
    grpc::ClientContext pull_context;
    pull_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    AttachSession(&pull_context, session);
    PullRequest pull;
    pull.set_worker_rank(0);
    pull.set_membership_epoch(played.view.membership_epoch());
    PullResponse pull_response;
    *pulled = server->Pull(&pull_context, pull, &pull_response);
    auto scheduler = Scheduler::NewStub(security->NewChannel(played.address, args));
    grpc::ClientContext heartbeat_context;
    heartbeat_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    AttachSession(&heartbeat_context, session);
    HeartbeatRequest request;
    request.set_role(WORKER);
    request.set_rank(0);
    HeartbeatResponse response;
    *heartbeat = scheduler->Heartbeat(&heartbeat_context, request, &response);
  };
  for (CertRole role : {CertRole::kServer, CertRole::kOperator, CertRole::kScheduler}) {
    grpc::Status pulled, heartbeat;
    call_with(role, &pulled, &heartbeat);
    const std::string is_for = absl::StrCat("the peer's certificate is for role ", CertRoleName(role),
                                            "; a worker needs the job's worker certificate (--tls_cert)");
    EXPECT_EQ(pulled.error_code(), grpc::StatusCode::PERMISSION_DENIED) << pulled.error_message();
    EXPECT_EQ(pulled.error_message(), absl::StrCat("Pull: ", is_for));
    EXPECT_EQ(heartbeat.error_code(), grpc::StatusCode::PERMISSION_DENIED) << heartbeat.error_message();
    EXPECT_EQ(heartbeat.error_message(), absl::StrCat("Heartbeat: ", is_for));
  }
  grpc::Status pulled, heartbeat;
  call_with(CertRole::kWorker, &pulled, &heartbeat);
  EXPECT_TRUE(pulled.ok()) << pulled.error_message();
  EXPECT_TRUE(heartbeat.ok()) << heartbeat.error_message();
  played.Finish();
}

// A role started with another role's certificate stops at once and says which it needs.
TEST(RoleCredentialsTest, ARoleRefusesToStartWithAnotherRolesCertificate) {
  const std::string dir = MakeTempDir("role-credentials-flags");
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(dir);
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<std::string> argv = {BinDir() + "/pstrain-server", "--scheduler=127.0.0.1:1", "--port=0"};
  for (std::string& flag : TransportSecurityFlags(job->For(CertRole::kWorker))) argv.push_back(std::move(flag));
  absl::StatusOr<RunResult> run = pstrain::testing::Run(argv, absl::Seconds(30));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 2) << run->output;
  EXPECT_THAT(run->output, HasSubstr("is the worker certificate; this process is a server and needs the job's "
                                     "server certificate"));
}

}  // namespace
}  // namespace pstrain::testing
