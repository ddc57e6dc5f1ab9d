// The ParameterServer gRPC service (proto/ps.proto): a thin adapter from rpcs to a ParameterStore.
//
// Pull, Push and PushPull are served raw: the handler gets the received bytes and decodes them in
// place with transport/tensor_wire.h, so a gradient's values are copied once, from the received
// slices into the store, and the weights of an answer once, from the store into a pooled buffer
// that gRPC sends from. The bytes are the protobuf encoding of the messages all the same, so any
// protobuf client can call them. FinishEpoch carries no tensor; it is raw only so that
// a request that does not parse gets INVALID_ARGUMENT (transport/parsed_unary.h).
//
// Handlers never block: a request the store parks keeps its reactor open without a thread and is
// finished by whichever thread releases it (see server/parameter_store.h). A client that cancels a
// parked request still holds a slot in the store until the step it waits for arrives or the
// store shuts down.
//
// The service is registered before the gRPC server starts, but the store can only be built once
// the cluster view is known; until SetStore, every rpc answers UNAVAILABLE, which clients retry.
//
// Transport counters: the service counts the bytes of every tensor request it receives and every
// answer it sends (counters()), with relaxed atomics and no allocation, so a server can report
// what it actually moved (FormatTransportCounters) instead of what the model size implies. The
// same sizes, at the same points, go to its Prometheus series (server/server_metrics.h), by shard,
// with each call's latency and the status code of every refused call.
//
// Replicas (JobSpec.replicas = 2): the server hosts two stores, its own shard and the live copy of
// the shard before it (server/server_runner.h). A request goes to the store of the shard it names
// (PushRequest.shard etc.; absent: the server's own shard); a shard the server does not host is
// FAILED_PRECONDITION "server 1 does not host shard 3 (it hosts shards 1 and 0)". Which store is
// primary and which a backup does not matter here: both take the same requests.
//
// Sessions: only workers call a server, each as its own rank. With RequireSessions (what every
// server process does, with the scheduler's public key from the view), every call must carry a
// worker's session credential (common/session_credential.h), checked before its request is
// decoded: none, a forged one or a server's is UNAUTHENTICATED or PERMISSION_DENIED; and a
// request naming another worker_rank than the credential's is PERMISSION_DENIED. Refused calls
// reach no store. Without it (in-process tests of the service) callers are not checked.
// With TLS the gate also asks for a worker certificate (transport/peer_role.h): a call from any
// other role's certificate is PERMISSION_DENIED before its request is read, whatever session it
// carries. On a unix socket (no certificate) the session alone decides. (The port's other
// service, ShardTransfer, is admitted by its own ShardTransferService::Admit: the runner's gate
// hands it those calls.)
//
// Memory bounds (server/inflight_budget.h): once SetLimits has the job's limits, a tensor call
// whose request is larger than the job's largest legitimate one is INVALID_ARGUMENT, and a call
// that would take the bytes held by calls in flight (requests and answer buffers, parked SYNC calls
// included) past the job's bound is RESOURCE_EXHAUSTED with trailing metadata
// "pstrain-retry-after-ms" (kRetryAfterMsKey), which clients retry with the same request id.
// Refused calls change nothing. gRPC has read a request in full before a handler runs (its own
// receive limit, set when the server starts listening, cannot know the job yet), so these checks
// bound what a caller makes the server keep and work on, not what it makes it read; the runner
// hands freed memory back to the system once it grows past a bound (common/malloc_tuning.h,
// FreedMemoryBound), whatever freed it.
//
// Thread safety: all methods may be called from any thread.
#ifndef PSTRAIN_SERVER_PS_SERVICE_H_
#define PSTRAIN_SERVER_PS_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "common/session_credential.h"
#include "transport/session_gate.h"
#include "transport/tensor_wire.h"
#include "proto/ps.grpc.pb.h"
#include "server/inflight_budget.h"
#include "server/parameter_store.h"
#include "server/server_metrics.h"

namespace pstrain::server {

// What the tensor methods (Pull, Push, PushPull) moved, in bytes of serialized messages as gRPC
// hands them over (grpc::ByteBuffer::Length(): the protobuf encoding, without gRPC's 5-byte
// message prefix, HTTP/2 framing or TCP headers). A request counts when its handler starts,
// whatever its answer; a response when an OK answer is encoded (an error carries no message).
// FinishEpoch, a few bytes once per epoch, is not counted.
struct TransportCounters {
  struct Method {
    int64_t requests = 0;
    int64_t request_bytes = 0;
    int64_t responses = 0;
    int64_t response_bytes = 0;
  };
  Method pull;
  Method push;
  Method push_pull;
  // From the first request received to the last answer encoded; zero before two events.
  absl::Duration active;

  // The three methods added up.
  Method Total() const;
};

// One line for the server's log, stable so that scripts can parse it (bench/report.py does):
//   "server 0: received 129394688 bytes (123.4 MiB) in 2345 requests, sent 125932011 bytes
//    (120.1 MiB) in 2345 responses over 12.345 s (10.0 / 9.7 MiB/s)"
// (one line; rates 0 when `active` is zero).
std::string FormatTransportCounters(int rank, const TransportCounters& counters);

using RawParameterServerBase = ParameterServer::WithRawCallbackMethod_Pull<
    ParameterServer::WithRawCallbackMethod_Push<ParameterServer::WithRawCallbackMethod_PushPull<
        ParameterServer::WithRawCallbackMethod_FinishEpoch<ParameterServer::Service>>>>;

class ParameterServerService final : public RawParameterServerBase, public SessionGate {
 public:
  // `metrics` (borrowed; must outlive the service) is where calls are metered; null: a private
  // registry nobody scrapes, so counters() works the same.
  explicit ParameterServerService(ServerMetrics* metrics = nullptr);
  ParameterServerService(const ParameterServerService&) = delete;
  ParameterServerService& operator=(const ParameterServerService&) = delete;

  // Starts serving from `store`. Shared: every call holds the store it reached while it calls into
  // it, so a store replaced later (ReplaceStores) lives on until its last call returns. Shut the
  // store down (which finishes parked rpcs) and then the gRPC server. The store's callbacks count
  // answers in this service, which must outlive them as well.
  // REQUIRES: called at most once, with a non-null store.
  void SetStore(std::shared_ptr<ParameterStore> store) { SetStores(std::move(store), nullptr); }
  // The same with a replica: `own` answers for shard own->rank() (and requests naming no shard),
  // `replica`, when not null, for shard replica->rank().
  // REQUIRES: called at most once (either form), own != nullptr, ranks differ.
  void SetStores(std::shared_ptr<ParameterStore> own, std::shared_ptr<ParameterStore> replica);
  // Serves `own` (and `replica`, when not null: with replicas the copy of another shard under the
  // new map) from now on instead of the stores SetStores gave (the job changed its server count:
  // stores of the new shard map; docs/design/resharding.md). Calls that reached the old ones
  // finish there; the caller shuts them down. A call naming a shard this server no longer hosts
  // is ABORTED from then on (routed under an older map: the caller refreshes its view).
  // REQUIRES: SetStores was called, with a replica exactly when `replica` is not null, and
  // own->rank() is the old store's.
  void ReplaceStores(std::shared_ptr<ParameterStore> own, std::shared_ptr<ParameterStore> replica);
  // SetStore and SetStores with borrowed stores (tests and benchmarks): each must outlive every rpc.
  void SetStore(ParameterStore* store) { SetStore(Borrowed(store)); }
  void SetStores(ParameterStore* own, ParameterStore* replica) { SetStores(Borrowed(own), Borrowed(replica)); }
  // What a session may push, beyond acting as its own rank.
  struct SessionRules {
    // ASYNC/SSP: every push carries the grant of its lease (PushRequest.lease_grant), which must
    // name the pushing worker, the push's data epoch and lease id, a batch of the lease from its
    // first batch on, and at least as many samples as that batch of `batch_size` positions holds.
    bool leased_pushes = false;
    int batch_size = 1;
  };
  // Checks every caller's session credential with `verifier` (see above), and pushes by `rules`.
  // REQUIRES: called at most once, before SetStore(s); rules.batch_size >= 1.
  void RequireSessions(std::unique_ptr<SessionVerifier> verifier, SessionRules rules);
  // SessionGate, for the transport (transport/session_gate.h): with TLS, a ParameterServer call
  // without a worker's valid session credential is refused before its request is read, once
  // sessions are required (before that, the handlers answer UNAVAILABLE anyway).
  absl::Status Admit(absl::string_view method, absl::string_view credential, const Peer& peer) const override;
  // Bounds requests from now on (see above); before it, none apply. May be called again.
  void SetLimits(const RequestLimits& limits);
  // Bytes held by calls in flight now. For tests and logs.
  int64_t inflight_bytes() const { return budget_.inflight_bytes(); }

  // Raw: a PullRequest in, a PullResponse out.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  // Raw: a PushRequest in, a PushResponse out.
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  // Raw: a PushRequest in, a PullResponse out.
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // Raw too, parsed by transport/parsed_unary.h: a request that does not parse is INVALID_ARGUMENT.
  grpc::ServerUnaryReactor* FinishEpoch(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

  // What the tensor methods moved so far. Each field is exact, but read while calls run they are
  // not one snapshot (a request may be counted and its answer not yet). Never blocks.
  TransportCounters counters() const;

 private:
  // One method's counters; relaxed atomics: they order nothing, they only add up.
  struct MethodCounters {
    std::atomic<int64_t> requests{0};
    std::atomic<int64_t> request_bytes{0};
    std::atomic<int64_t> responses{0};
    std::atomic<int64_t> response_bytes{0};

    TransportCounters::Method Read() const;
  };

  // Counts a request of `bytes` to `method` / an answer of `bytes` from it, and the time.
  void CountRequest(MethodCounters* method, size_t bytes);
  void CountResponse(MethodCounters* method, size_t bytes);
  // Moves the activity window to include now (steady clock, nanoseconds).
  void NoteActivity();

  // The store of `shard` (nullopt: the server's own), or nullptr after finishing `reactor` with
  // UNAVAILABLE (not ready yet) or FAILED_PRECONDITION (a shard this server does not host).
  // False after finishing `reactor` with INVALID_ARGUMENT when `request` exceeds the job's limit.
  // Every *OrFinish counts its refusal in `meter` (and StoreOrFinish routes it to the store's shard).
  bool SizeOkOrFinish(const char* what, const grpc::ByteBuffer& request, grpc::ServerUnaryReactor* reactor,
                      ServerMetrics::Call* meter);
  // Admits the call (`reading`: a pull, see InflightBudget::Admit), holding its request and
  // `answer_bytes` in `ticket`, or returns false after finishing `reactor` with RESOURCE_EXHAUSTED
  // and the retry hint.
  bool AdmitOrFinish(const char* what, grpc::CallbackServerContext* context, const grpc::ByteBuffer& request,
                     size_t answer_bytes, bool reading, grpc::ServerUnaryReactor* reactor, ServerMetrics::Call* meter,
                     InflightBudget::Ticket* ticket);
  // A shared_ptr that does not own `store` (null for null).
  static std::shared_ptr<ParameterStore> Borrowed(ParameterStore* store) {
    if (store == nullptr) return nullptr;
    return std::shared_ptr<ParameterStore>(store, [](ParameterStore*) {});
  }
  std::shared_ptr<ParameterStore> StoreOrFinish(std::optional<int> shard, grpc::ServerUnaryReactor* reactor,
                                                ServerMetrics::Call* meter) const;
  // Decodes a push into `push` (its views borrow the request's bytes) and returns the store of its
  // shard, or nullptr after finishing `reactor` with INVALID_ARGUMENT (bytes that do not decode)
  // or as StoreOrFinish does.
  // `caller` (CallerRank's) must be the push's worker_rank (CheckActsAsWorker: finished with its
  // error).
  std::shared_ptr<ParameterStore> DecodePushOrFinish(std::optional<int> caller, absl::string_view method,
                                                     const grpc::ByteBuffer& request, IncomingPush* push,
                                                     grpc::ServerUnaryReactor* reactor,
                                                     ServerMetrics::Call* meter) const;
  // False after finishing `reactor` with `caller` (CallerRank's status) when it is not OK.
  static bool CallerOkOrFinish(const absl::Status& caller, grpc::ServerUnaryReactor* reactor,
                               ServerMetrics::Call* meter);

  // The worker rank the call's session credential names; nullopt when callers are not checked
  // (no RequireSessions, or the store is not set yet: the call is then refused UNAVAILABLE). Errors
  // as the file comment says, prefixed with `method`.
  absl::StatusOr<std::optional<int>> CallerRank(const grpc::CallbackServerContext& context,
                                                absl::string_view method) const;
  // CallerRank for a credential.
  absl::StatusOr<std::optional<int>> WorkerOf(absl::string_view credential, absl::string_view method) const;
  // PERMISSION_DENIED unless a checked `caller` is `worker_rank`.
  static absl::Status CheckActsAsWorker(std::optional<int> caller, int worker_rank, absl::string_view method);
  // With sessions and rules_.leased_pushes: the push's lease grant (see SessionRules).
  // UNAUTHENTICATED for a missing or forged grant, PERMISSION_DENIED for a batch not handed to the
  // pusher, INVALID_ARGUMENT for more samples than the batch holds.
  absl::Status CheckLeaseGrant(const PushRequest& push, absl::string_view method) const;

  // Constant after construction: metrics_ is own_metrics_ (over own_registry_) or the caller's.
  std::unique_ptr<metrics::Registry> own_registry_;
  std::unique_ptr<ServerMetrics> own_metrics_;
  ServerMetrics* metrics_ = nullptr;

  // Written before store_, like replica_; null: callers are not checked.
  std::unique_ptr<SessionVerifier> sessions_;
  SessionRules rules_;
  // replica_ is written before store_, and store_ is read first: a non-null store_ means both are set.
  // Read and written only with std::atomic_load and std::atomic_store (shared_ptr's atomic access).
  std::shared_ptr<ParameterStore> store_;
  std::shared_ptr<ParameterStore> replica_;
  // Set by ReplaceStores: a shard not hosted here may have been before.
  std::atomic<bool> replaced_{false};

  InflightBudget budget_;
  MethodCounters pull_;
  MethodCounters push_;
  MethodCounters push_pull_;
  // Steady-clock nanoseconds of the first and the latest counted event; 0: none yet.
  std::atomic<int64_t> first_event_ns_{0};
  std::atomic<int64_t> last_event_ns_{0};
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_PS_SERVICE_H_
