// gRPC health checking (grpc.health.v1.Health, gRPC's built-in service) for every role, so that
// an orchestrator (Kubernetes' `grpc` probe) can ask whether a role is useful.
//
// The overall status (service name "") is what a probe checks. Roles set it NOT_SERVING until they
// are useful (scheduler: listening; server: registered and its shard ready; worker: registered),
// SERVING while they are, and NOT_SERVING again once the job has ended and they shut down.
//
// Where a probe asks: the scheduler and the servers serve it on their main port, which with TLS
// demands a client certificate that a kubelet cannot present; so every role can also serve it on a
// separate plaintext port (HealthServer, --health_port). That listener is allowed on any address,
// unlike a plaintext main port (transport/transport_security.h): it answers nothing but the health
// status, which tells an outsider only whether the role is up and in the job: no data, no way in.
// It takes a request of at most 512 bytes (a HealthCheckRequest is a service name), at most 4
// streams a connection, and gRPC may hold at most 1 MiB for the whole listener (a ResourceQuota:
// past it calls are reset), so that what an outsider sends cannot grow the role's
// memory by more than a few MiB (docs/guides/security.md, "Listeners and buffers").
//
// Thread-safe: gRPC's health service takes status changes from any thread.
#ifndef PSTRAIN_TRANSPORT_HEALTH_H_
#define PSTRAIN_TRANSPORT_HEALTH_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace pstrain {

// Makes every gRPC server built after this call serve grpc.health.v1.Health. Idempotent; call
// before building the server (gRPC reads the setting in ServerBuilder::BuildAndStart).
void EnableHealthService();

// Sets `server`'s overall health status. `server` was built after EnableHealthService(); does
// nothing (but log) otherwise.
void SetServing(grpc::Server* server, bool serving);

// A plaintext gRPC server that serves only the health service: for a role with no server of its
// own (a worker), or one whose server a probe cannot reach (TLS). Starts NOT_SERVING; shuts down
// (within a second) when destroyed.
class HealthServer {
 public:
  // Listens on host:port (port 0: any free port). UNAVAILABLE when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(const std::string& host, int port);
  ~HealthServer();

  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  void SetServing(bool serving) { pstrain::SetServing(server_.get(), serving); }
  int port() const { return port_; }

 private:
  HealthServer(std::unique_ptr<grpc::CallbackGenericService> unknown, std::unique_ptr<grpc::Server> server, int port)
      : unknown_(std::move(unknown)), server_(std::move(server)), port_(port) {}

  // Answers every other method UNIMPLEMENTED. gRPC refuses to build a server without a service of
  // its own that it knows how to poll; this one costs nothing.
  const std::unique_ptr<grpc::CallbackGenericService> unknown_;
  const std::unique_ptr<grpc::Server> server_;
  const int port_;
};

// The separate health listener a role was asked for: null (OK) for port 0, meaning none; otherwise
// HealthServer::Start(host, port), logged. INVALID_ARGUMENT for a port outside [0, 65535] or an
// empty host.
absl::StatusOr<std::unique_ptr<HealthServer>> StartHealthListener(const std::string& host, int port);

// Sets the status of a role's main server (may be null: none, or not yet listening) and of its
// health listener (may be null: none) together, so a probe gets the same answer on either port.
void SetServing(grpc::Server* server, HealthServer* listener, bool serving);

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_HEALTH_H_
