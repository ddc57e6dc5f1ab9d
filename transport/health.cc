#include "transport/health.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "common/listen_error.h"

namespace pstrain {
namespace {

// A HealthCheckRequest is a service name: Kubernetes' probe sends "" or a short name.
constexpr int kMaxHealthRequestBytes = 512;
// What gRPC may hold for the whole listener: every connection's read buffers and every request in
// flight. gRPC reads a message in full before it checks its size, opening the flow-control window
// as far as the message's length prefix asks; past this quota it resets calls it is reading
// (RST_STREAM ENHANCE_YOUR_CALM) instead. Measured: 8 concurrent 256 MiB calls grew the role's
// RSS by 4 MB under this quota, by 1 GB without one.
constexpr size_t kHealthMemoryQuotaBytes = 1 << 20;
// Streams one connection may have open at once; a probe makes one call per connection.
constexpr int kHealthMaxStreamsPerConnection = 4;

}  // namespace

void EnableHealthService() { grpc::EnableDefaultHealthCheckService(true); }

void SetServing(grpc::Server* server, bool serving) {
  grpc::HealthCheckServiceInterface* health = server == nullptr ? nullptr : server->GetHealthCheckService();
  if (health == nullptr) {
    LOG(WARNING) << "no health service to mark " << (serving ? "SERVING" : "NOT_SERVING");
    return;
  }
  // Every service the server has, the overall one ("") included: whatever a probe asks for.
  health->SetServingStatus(serving);
}

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(const std::string& host, int port) {
  EnableHealthService();
  const std::string address = JoinHostPort(host, port);
  int selected_port = 0;
  auto unknown = std::make_unique<grpc::CallbackGenericService>();
  grpc::ServerBuilder builder;
  // Plaintext on any address, by design (see the header): it serves the health status only.
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &selected_port);
  builder.RegisterCallbackGenericService(unknown.get());
  // Bounded before a byte is read (see the constants). Both services are callback services, which
  // hold no thread of their own while a call is open.
  grpc::ResourceQuota quota("health listener");
  quota.Resize(kHealthMemoryQuotaBytes);
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(kMaxHealthRequestBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kHealthMaxStreamsPerConnection);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || selected_port == 0) {
    return CannotListen("health service", address, "health_port");
  }
  // gRPC's service starts SERVING; nothing is useful yet.
  pstrain::SetServing(server.get(), false);
  return std::unique_ptr<HealthServer>(new HealthServer(std::move(unknown), std::move(server), selected_port));
}

HealthServer::~HealthServer() {
  pstrain::SetServing(server_.get(), false);
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

absl::StatusOr<std::unique_ptr<HealthServer>> StartHealthListener(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("health port: got ", port, ", expected 0..65535 (0: none)"));
  }
  if (port == 0) return std::unique_ptr<HealthServer>();
  if (host.empty()) return absl::InvalidArgumentError("health host is empty, expected an address to listen on");
  ASSIGN_OR_RETURN(std::unique_ptr<HealthServer> listener, HealthServer::Start(host, port));
  LOG(INFO) << "health service (plaintext, health status only) on " << JoinHostPort(host, listener->port());
  return listener;
}

void SetServing(grpc::Server* server, HealthServer* listener, bool serving) {
  if (server != nullptr) SetServing(server, serving);
  if (listener != nullptr) listener->SetServing(serving);
}

}  // namespace pstrain
