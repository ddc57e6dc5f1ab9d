// Every role serves gRPC health checking (grpc.health.v1.Health, what Kubernetes' grpc probe asks):
// SERVING while the job runs, NOT_SERVING once it has ended; with TLS on the main ports, on
// separate plaintext health ports. Real processes, real gRPC.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "transport/job_credentials.h"
#include "scheduler/client/scheduler_client.h"
#include "transport/transport_security.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// The overall ("") status at `address`, or the gRPC error as text.
std::string Check(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  HealthCheckRequest request;
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return absl::StrCat("error ", status.error_code(), ": ", status.error_message());
  return HealthCheckResponse::ServingStatus_Name(response.status());
}

// Polls `address` until it answers `want` (fails the test after 60 s).
void AwaitStatus(const std::string& address, const std::string& want, const std::string& who) {
  std::string last;
  for (int i = 0; i < 600; ++i) {
    last = Check(address);
    if (last == want) return;
    absl::SleepFor(absl::Milliseconds(100));
  }
  FAIL() << who << " at " << address << " never answered " << want << "; last: " << last;
}

TEST(HealthTest, EveryRoleIsServingDuringTheJobAndNotServingAfterIt) {
  ManualCluster cluster("health");
  const int worker_health = FreeLoopbackPort();
  // Enough steps to look at every role while it trains; the scheduler lingers after the end.
  // The scheduler and the server listen everywhere (plaintext: --insecure); the server advertises
  // the loopback address.
  cluster.Start(/*servers=*/1, /*workers=*/1,
                {"--host=0.0.0.0", "--insecure", "--linger_ms=20000", "--epochs=2", "--train_limit=12000",
                 "--test_limit=500", "--batch_size=16", "--eval_last_epoch_only"},
                /*server_flags=*/{"--host=0.0.0.0", "--insecure", "--advertise_host=127.0.0.1"},
                /*worker_flags=*/{"--health_port=" + std::to_string(worker_health), "--health_host=127.0.0.1"});

  AwaitStatus(cluster.address, "SERVING", "the scheduler");
  const std::string worker_address = absl::StrCat("127.0.0.1:", worker_health);
  AwaitStatus(worker_address, "SERVING", "the worker");
  // The server registered the advertised address; the workers dial it there.
  std::string server_address;
  for (int i = 0; i < 600 && server_address.empty(); ++i) {
    auto client = *SchedulerClient::Create(cluster.address, absl::Seconds(2));
    absl::StatusOr<ClusterView> view = client->GetClusterView();
    if (view.ok() && view->servers_size() == 1) server_address = view->servers(0).address();
    if (server_address.empty()) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(server_address.rfind("127.0.0.1:", 0), 0u) << server_address;
  AwaitStatus(server_address, "SERVING", "the server");
  // Every role was SERVING at the same time: the job is still running.
  {
    auto client = *SchedulerClient::Create(cluster.address, absl::Seconds(2));
    absl::StatusOr<JobStatus> status = client->GetJobStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->state(), RUNNING) << "the job ended before every role was seen SERVING; make it longer";
  }

  absl::StatusOr<int> worker_exit = cluster.workers[0]->Wait(absl::Seconds(120));
  ASSERT_TRUE(worker_exit.ok() && *worker_exit == 0) << cluster.workers[0]->Output();
  // Ended: the lingering scheduler still answers, NOT_SERVING.
  AwaitStatus(cluster.address, "NOT_SERVING", "the scheduler after the end");
  absl::StatusOr<int> server_exit = cluster.servers[0]->Wait(absl::Seconds(30));
  EXPECT_TRUE(server_exit.ok() && *server_exit == 0) << cluster.servers[0]->Output();
  cluster.scheduler->Kill(SIGTERM);  // Cuts the linger short.
  absl::StatusOr<int> scheduler_exit = cluster.scheduler->Wait(absl::Seconds(10));
  EXPECT_TRUE(scheduler_exit.ok() && *scheduler_exit == 0) << cluster.scheduler->Output();
}

// Kubernetes' grpc probe cannot present a client certificate, so with TLS on the main ports it asks
// the scheduler's and the server's plaintext health ports, which follow the main ports' status.
TEST(HealthTest, TlsSecuredRolesAnswerPlaintextProbesOnTheirHealthPorts) {
  ManualCluster cluster("health-tls");
  absl::StatusOr<JobCredentials> job = MakeJobCredentials(cluster.dir());
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> security =
      TransportSecurity::Create(job->For(CertRole::kOperator));
  ASSERT_TRUE(security.ok()) << security.status();
  // Each role with its own certificate.
  auto secured = [&job](CertRole role, std::vector<std::string> flags) {
    for (std::string& flag : TransportSecurityFlags(job->For(role))) flags.push_back(std::move(flag));
    return flags;
  };
  const int scheduler_health = FreeLoopbackPort();
  const int server_health = FreeLoopbackPort();
  // The health ports listen everywhere (the default --health_host) without --insecure: allowed,
  // they serve nothing but the health status. The main ports stay on loopback, with TLS.
  cluster.Start(/*servers=*/1, /*workers=*/1,
                secured(CertRole::kScheduler,
                        {"--health_port=" + std::to_string(scheduler_health), "--linger_ms=20000", "--epochs=2",
                         "--train_limit=12000", "--test_limit=500", "--batch_size=16", "--eval_last_epoch_only"}),
                /*server_flags=*/secured(CertRole::kServer, {"--health_port=" + std::to_string(server_health)}),
                /*worker_flags=*/secured(CertRole::kWorker, {}));

  const std::string scheduler_probe = absl::StrCat("127.0.0.1:", scheduler_health);
  const std::string server_probe = absl::StrCat("127.0.0.1:", server_health);
  AwaitStatus(scheduler_probe, "SERVING", "the scheduler's health port");
  AwaitStatus(server_probe, "SERVING", "the server's health port");
  // The main port asks for a certificate the probe does not have.
  EXPECT_EQ(Check(cluster.address).rfind("error ", 0), 0u) << "a plaintext probe got through the TLS port";
  // Both were SERVING while the job ran.
  {
    auto client = SchedulerClient::Create(cluster.address, absl::Seconds(2), *security);
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<JobStatus> status = (*client)->GetJobStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->state(), RUNNING) << "the job ended before both roles were seen SERVING; make it longer";
  }

  absl::StatusOr<int> worker_exit = cluster.workers[0]->Wait(absl::Seconds(120));
  ASSERT_TRUE(worker_exit.ok() && *worker_exit == 0) << cluster.workers[0]->Output();
  // Ended: the lingering scheduler's health port says so.
  AwaitStatus(scheduler_probe, "NOT_SERVING", "the scheduler's health port after the end");
  absl::StatusOr<int> server_exit = cluster.servers[0]->Wait(absl::Seconds(30));
  EXPECT_TRUE(server_exit.ok() && *server_exit == 0) << cluster.servers[0]->Output();
  cluster.scheduler->Kill(SIGTERM);  // Cuts the linger short.
  absl::StatusOr<int> scheduler_exit = cluster.scheduler->Wait(absl::Seconds(10));
  EXPECT_TRUE(scheduler_exit.ok() && *scheduler_exit == 0) << cluster.scheduler->Output();
}

}  // namespace
}  // namespace pstrain::testing
