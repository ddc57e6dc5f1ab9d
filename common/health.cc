#include "common/health.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {

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
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &selected_port);
  builder.RegisterCallbackGenericService(unknown.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || selected_port == 0) {
    return absl::UnavailableError(absl::StrCat("health service: cannot listen on ", address));
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

std::string JoinHostPort(const std::string& host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace pstrain
