// The worker's connection to every parameter server over gRPC: the implementation of PsApi
// (worker/ps_api.h) that the worker processes use.
//
// Several TCP connections per server (tcp_connections channels, each with a subchannel of its
// own), one over a unix socket. Calls are asynchronous underneath (the gRPC callback API), so a
// fan-out to all servers has every request in flight at once; the *All methods wrap that fan-out
// into one blocking call that returns when every server has answered.
//
// Each call takes the next of its server's connections in turn, so the parts of an overlapped
// step (worker/layer_pusher.h) travel side by side. Why: on our 2-core machines a step of 4-64 MiB
// sent as 2 partial pushes over TCP on 127.0.0.1 moved 1.05-1.15x faster over 2 connections than
// over one, and 1.1-1.3x faster than as one push (medians of 5 runs of bench/ps_bench.cc,
// PushPullConns2 vs PushPullCalls2 and PushPullConns1); 4 connections were no better than 2. A
// whole push is one call a step, so it gains nothing.
//
// Backpressure: a tensor call that a server refuses with RESOURCE_EXHAUSTED and a retry hint
// (trailing metadata kRetryAfterMsKey, transport/grpc_status.h: the server holds too many bytes in
// flight) is sent again, the same bytes and so the same request id, after the hinted delay (at
// most 1 s), up to 50 times and within the call's deadline; then the caller gets the
// RESOURCE_EXHAUSTED. The server changed nothing when it refused, so the retry is safe. A
// RESOURCE_EXHAUSTED without the hint (e.g. gRPC's own message size limit) is final.
//
// Traffic: with a TrafficMeter (set_traffic_meter), every request sent (each attempt) and every
// answer decoded counts its serialized bytes there, and a push the bytes its compression saved.
//
// Tensors travel raw (transport/tensor_wire.h): a push's values are sent from where the caller keeps
// them (OutgoingPush), without a copy, and an answer's values are left in the received bytes
// (IncomingPull) for the caller to copy once, straight into its weights.
#ifndef PSTRAIN_WORKER_PS_CLIENT_H_
#define PSTRAIN_WORKER_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "transport/tensor_wire.h"
#include "transport/transport_security.h"
#include "proto/ps.grpc.pb.h"
#include "worker/ps_api.h"
#include "worker/shard_routing.h"
#include "worker/traffic_meter.h"

namespace grpc {
class ClientContext;
template <class RequestType, class ResponseType>
class TemplatedGenericStub;
class ByteBuffer;
}  // namespace grpc

namespace pstrain::worker {

// Thread-safe.
class PsClient : public PsApi {
 public:
  // Channels to every server of `view`, by rank: `tcp_connections` to a server dialled over
  // TCP, one to a server dialled on its unix socket. Channels connect lazily, on their first
  // call. Ranks missing from the view (a dead server, with replicas) get no channel: calls to
  // them fail UNAVAILABLE at once. INVALID_ARGUMENT when the view lists no server, or ranks that
  // are negative or not ascending, or tcp_connections < 1. Every call gets `rpc_timeout` as
  // deadline. With `unix_sockets`, a server on this host (ServerInfo.local with this process's
  // common/host_id.h id) is dialled on its unix domain socket instead of TCP. `security` secures
  // every channel (transport/transport_security.h); null: plaintext. `session_credential`, the one
  // this worker's registration got (SchedulerClient::session_credential), goes with every call:
  // servers refuse calls without it, or acting as another worker (common/session_credential.h).
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(const ClusterView& view, absl::Duration rpc_timeout,
                                                          bool unix_sockets = true, int tcp_connections = 2,
                                                          std::shared_ptr<const TransportSecurity> security = nullptr,
                                                          std::string session_credential = "");
  ~PsClient() override;

  // Counts this client's traffic into `meter` (borrowed; must outlive the client; null: none).
  // REQUIRES: no call has started yet.
  void set_traffic_meter(TrafficMeter* meter) { traffic_ = meter; }

  int num_servers() const override { return static_cast<int>(servers_.size()); }
  // How many channels (connections) this client has to `server`: 0 when it is not in the view.
  int num_connections(int server) const;

  // Reconnects (all of its connections) to every server whose address changed in `view` (a
  // replacement took a dead server's rank). Servers missing from the view keep their old
  // channels (calls to them fail UNAVAILABLE).
  // Must not run concurrently with calls of this client (the trainer calls it between steps).
  void UpdateServers(const ClusterView& view) override;

  // Start one call; `done` runs once on a gRPC thread when it ends. Errors carry the server's
  // rank and address; an answer that does not decode is DATA_LOSS. `request` (and the values it
  // points at) and `response` are borrowed until `done` runs.
  void PullAsync(int server, const PullRequest* request, IncomingPull* response, Done done) override;
  // `group` (any non-null tag) lets CancelGroup end the call early.
  void PushAsync(int server, const OutgoingPush* request, PushResponse* response, Done done,
                 const void* group = nullptr) override;
  void PushPullAsync(int server, const OutgoingPush* request, IncomingPull* response, Done done,
                     const void* group = nullptr) override;
  void FinishEpochAsync(int server, const FinishEpochRequest* request, FinishEpochResponse* response,
                        Done done) override;

  // Fan-outs: requests[i] goes to server i; blocks until all answered. Returns the first error
  // (in server order) or OK.
  absl::Status PullAll(const std::vector<PullRequest>& requests, std::vector<IncomingPull>* responses);
  absl::Status PushPullAll(const std::vector<OutgoingPush>& requests, std::vector<IncomingPull>* responses);
  absl::Status FinishEpochAll(const FinishEpochRequest& request);

  // Cancels the calls in flight that were started with `group` (their `done` runs with
  // UNAVAILABLE, see End); later calls are not affected.
  void CancelGroup(const void* group) override;

  // Cancels every call in flight and makes later calls fail at once with CANCELLED `reason`.
  // Used when the job fails while this worker is parked in a sync step.
  void CancelAll(const std::string& reason) override;

 private:
  struct Call;
  PsClient(absl::Duration rpc_timeout, std::string host_id, int tcp_connections,
           std::shared_ptr<const TransportSecurity> security, std::string session_credential);
  // Where to dial `server`: its unix socket when it is on this host, else its TCP address.
  std::string DialAddress(const ServerInfo& server) const;
  using GenericStub = grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>;
  // One channel: the typed stub (FinishEpoch) and the raw one (the tensor methods) share it.
  struct Stubs {
    std::unique_ptr<ParameterServer::Stub> typed;
    std::unique_ptr<GenericStub> raw;
  };
  // A server's channels; `channels` is empty when the server is not in the view.
  struct Server {
    std::string address;
    std::vector<Stubs> channels;
    std::atomic<uint64_t> next{0};  // round robin over `channels`
  };
  // (Re)dials `server` at `address`: tcp_connections_ channels, or one for a unix socket.
  void Connect(Server* server, const std::string& address) const;
  // The channel for the next call to `server`. REQUIRES: the server has channels.
  Stubs& NextChannel(int server);
  // Starts the raw call `method` with call->request already encoded; `decode` turns the answer's
  // bytes into the caller's response.
  void StartRaw(int server, Call* call, const char* method,
                std::function<absl::Status(const grpc::ByteBuffer&)> decode);
  // Sends the raw call as StartRaw set it up (again, for a retry).
  void SendRaw(Call* call);
  // After a failed attempt: true when the call waits for a retry (the server's hint, the retry
  // count and the deadline allow it, and nothing was cancelled); false to end it with `status`.
  bool MaybeRetry(Call* call, const grpc::Status& status);
  // The retry thread: sends waiting calls when their delay is over, ends cancelled ones.
  void RetryLoop();

  // Prepares a call's context and bookkeeping; nullptr (after calling done) if cancelled or
  // `server` has no channel.
  Call* Begin(int server, const char* what, Done done, const void* group = nullptr);
  void End(Call* call, const grpc::Status& status);

  template <typename Request, typename Response, typename Start>
  absl::Status FanOut(int n, const Request* requests, Response* responses, Start start);

  const absl::Duration rpc_timeout_;
  const std::string host_id_;  // this host's id; empty: never use unix sockets
  const int tcp_connections_;
  const std::shared_ptr<const TransportSecurity> security_;
  const std::string session_credential_;
  TrafficMeter* traffic_ = nullptr;  // set before the first call
  // By rank; changed only by Create and UpdateServers, which run while no call does.
  std::vector<std::unique_ptr<Server>> servers_;

  absl::Mutex mu_;
  absl::flat_hash_set<Call*> in_flight_ ABSL_GUARDED_BY(mu_);
  std::string cancelled_ ABSL_GUARDED_BY(mu_);  // Non-empty once CancelAll ran.
  // Calls out of in_flight_ whose End has not returned yet; the destructor waits for them too.
  int ending_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls (still in in_flight_) waiting until the time beside them to be sent again.
  std::vector<std::pair<absl::Time, Call*>> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the destructor ends the retry thread
  // Last member: it starts once everything it uses is constructed.
  std::thread retry_thread_;
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_PS_CLIENT_H_
