#include "server/ps_service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/buffer_pool.h"
#include "transport/grpc_status.h"
#include "transport/parsed_unary.h"
#include "transport/session_metadata.h"
#include "transport/tensor_wire.h"
#include "data/assignment.h"
#include "glog/logging.h"

namespace pstrain::server {
namespace {

template <typename Request>
std::optional<int> ShardOf(const Request& request) {
  if (!request.has_shard()) return std::nullopt;
  return request.shard();
}

// The answer of one raw call, alive until it is encoded. The request is not in it: the store is
// done with a request when its call returns, so the received bytes go back to gRPC then, not when
// a parked answer is finally released.
struct RawAnswer {
  explicit RawAnswer(const ServerMetrics::Call& call) : meter(call) {}

  PullResponse header;            // the answer, without the values
  PushResponse pushed;            // Push's answer
  PooledBuffer values;            // the answer's values
  OutgoingRowsAnswer rows;        // the answer's embedding rows
  InflightBudget::Ticket ticket;  // the call's bytes, held until it is finished
  ServerMetrics::Call meter;      // routed to the answering store's shard
};

// Counts a refusal and finishes the call with it.
void Refuse(ServerMetrics::Call* meter, grpc::ServerUnaryReactor* reactor, const grpc::Status& status) {
  meter->Refused(static_cast<absl::StatusCode>(status.error_code()));
  reactor->Finish(status);
}

// Counts a store's answer (OK: `response`'s bytes for the shard) and finishes the call with it.
void Answer(ServerMetrics::Call* meter, const absl::Status& status, const grpc::ByteBuffer& response,
            grpc::ServerUnaryReactor* reactor) {
  if (status.ok()) {
    meter->Answered(static_cast<int64_t>(response.Length()));
  } else {
    meter->Refused(status.code());
  }
  reactor->Finish(ToGrpcStatus(status));
}

// Room for the answer to `push`: the floats of its chunks, which a valid push (checked by the
// store) matches exactly; never more than the store holds, whatever the lengths claim.
size_t AnswerBytes(const PushRequest& push, const ParameterStore& store) {
  const int64_t most = store.num_elements();
  int64_t floats = 0;
  for (const TensorChunk& c : push.chunks()) floats = std::min(most, floats + std::clamp<int64_t>(c.length(), 0, most));
  return 4 * static_cast<size_t>(floats);
}

constexpr double kMiB = 1024.0 * 1024.0;

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TransportCounters::Method TransportCounters::Total() const {
  Method total;
  for (const Method* m : {&pull, &push, &push_pull}) {
    total.requests += m->requests;
    total.request_bytes += m->request_bytes;
    total.responses += m->responses;
    total.response_bytes += m->response_bytes;
  }
  return total;
}

std::string FormatTransportCounters(int rank, const TransportCounters& counters) {
  const TransportCounters::Method total = counters.Total();
  const double seconds = absl::ToDoubleSeconds(counters.active);
  const double in_mib = static_cast<double>(total.request_bytes) / kMiB;
  const double out_mib = static_cast<double>(total.response_bytes) / kMiB;
  return absl::StrFormat(
      "server %d: received %d bytes (%.1f MiB) in %d requests, sent %d bytes (%.1f MiB) in %d responses over %.3f s "
      "(%.1f / %.1f MiB/s)",
      rank, total.request_bytes, in_mib, total.requests, total.response_bytes, out_mib, total.responses, seconds,
      seconds > 0 ? in_mib / seconds : 0.0, seconds > 0 ? out_mib / seconds : 0.0);
}

TransportCounters::Method ParameterServerService::MethodCounters::Read() const {
  TransportCounters::Method m;
  m.requests = requests.load(std::memory_order_relaxed);
  m.request_bytes = request_bytes.load(std::memory_order_relaxed);
  m.responses = responses.load(std::memory_order_relaxed);
  m.response_bytes = response_bytes.load(std::memory_order_relaxed);
  return m;
}

TransportCounters ParameterServerService::counters() const {
  TransportCounters c;
  c.pull = pull_.Read();
  c.push = push_.Read();
  c.push_pull = push_pull_.Read();
  const int64_t first = first_event_ns_.load(std::memory_order_relaxed);
  const int64_t last = last_event_ns_.load(std::memory_order_relaxed);
  if (first != 0 && last > first) c.active = absl::Nanoseconds(last - first);
  return c;
}

void ParameterServerService::CountRequest(MethodCounters* method, size_t bytes) {
  method->requests.fetch_add(1, std::memory_order_relaxed);
  method->request_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  NoteActivity();
}

void ParameterServerService::CountResponse(MethodCounters* method, size_t bytes) {
  method->responses.fetch_add(1, std::memory_order_relaxed);
  method->response_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  NoteActivity();
}

void ParameterServerService::NoteActivity() {
  const int64_t now = SteadyNanos();
  int64_t first = first_event_ns_.load(std::memory_order_relaxed);
  if (first == 0) first_event_ns_.compare_exchange_strong(first, now, std::memory_order_relaxed);
  // A maximum, not a plain store: threads finish out of order.
  int64_t last = last_event_ns_.load(std::memory_order_relaxed);
  while (last < now && !last_event_ns_.compare_exchange_weak(last, now, std::memory_order_relaxed)) {
  }
}

ParameterServerService::ParameterServerService(ServerMetrics* metrics) {
  if (metrics == nullptr) {
    own_registry_ = std::make_unique<metrics::Registry>();
    own_metrics_ = std::make_unique<ServerMetrics>(own_registry_.get());
    metrics = own_metrics_.get();
  }
  metrics_ = metrics;
}

void ParameterServerService::SetStores(std::shared_ptr<ParameterStore> own, std::shared_ptr<ParameterStore> replica) {
  CHECK(own != nullptr);
  CHECK(replica == nullptr || replica->rank() != own->rank()) << "a replica of the server's own shard";
  CHECK(std::atomic_load(&store_) == nullptr) << "SetStore called twice";
  // Before store_ is published: calls route to these series only once they see a store.
  metrics_->SetShards(own->rank(), replica == nullptr ? std::nullopt : std::optional<int>(replica->rank()));
  std::atomic_store(&replica_, std::move(replica));
  std::atomic_store(&store_, std::move(own));
}

void ParameterServerService::ReplaceStores(std::shared_ptr<ParameterStore> own,
                                           std::shared_ptr<ParameterStore> replica) {
  CHECK(own != nullptr);
  const std::shared_ptr<ParameterStore> old = std::atomic_load(&store_);
  CHECK(old != nullptr) << "ReplaceStores before SetStores";
  CHECK_EQ(std::atomic_load(&replica_) == nullptr, replica == nullptr)
      << "ReplaceStores changes the replica's presence";
  CHECK_EQ(old->rank(), own->rank());
  CHECK(replica == nullptr || replica->rank() != own->rank()) << "a replica of the server's own shard";
  metrics_->SetShards(own->rank(), replica == nullptr ? std::nullopt : std::optional<int>(replica->rank()));
  replaced_.store(true);
  if (replica != nullptr) std::atomic_store(&replica_, std::move(replica));
  std::atomic_store(&store_, std::move(own));
}

void ParameterServerService::RequireSessions(std::unique_ptr<SessionVerifier> verifier, SessionRules rules) {
  CHECK(std::atomic_load(&store_) == nullptr) << "RequireSessions after SetStore";
  CHECK(sessions_ == nullptr) << "RequireSessions called twice";
  CHECK_GE(rules.batch_size, 1);
  sessions_ = std::move(verifier);
  rules_ = rules;
}

absl::Status ParameterServerService::CheckLeaseGrant(const PushRequest& push, absl::string_view method) const {
  if (sessions_ == nullptr || !rules_.leased_pushes) return absl::OkStatus();
  absl::StatusOr<LeaseGrant> lease = sessions_->VerifyLease(push.lease_grant());
  if (!lease.ok()) return absl::Status(lease.status().code(), absl::StrCat(method, ": ", lease.status().message()));
  const std::string batch = absl::StrCat(method, ": batch ", push.lease_batch(), " of lease ", push.lease_id(),
                                         " in data epoch ", push.data_epoch(), " from worker ", push.worker_rank());
  if (lease->worker_rank != push.worker_rank() || lease->epoch != push.data_epoch() ||
      lease->lease_id != push.lease_id()) {
    return absl::PermissionDeniedError(absl::StrCat(batch, " was not handed to it: its grant is for lease ",
                                                    lease->lease_id, " in data epoch ", lease->epoch, " to worker ",
                                                    lease->worker_rank));
  }
  if (lease->granted_unix_ms != push.lease_granted_unix_ms()) {
    return absl::PermissionDeniedError(absl::StrCat(batch, ": lease_granted_unix_ms is ", push.lease_granted_unix_ms(),
                                                    ", its grant says ", lease->granted_unix_ms));
  }
  const data::Range range{lease->begin, std::max(lease->begin, lease->end)};
  const int64_t batches = data::NumBatches(range, rules_.batch_size);
  if (push.lease_batch() < std::max<int64_t>(0, lease->first_batch) || push.lease_batch() >= batches) {
    return absl::PermissionDeniedError(
        absl::StrCat(batch, ": the lease handed it batches ", lease->first_batch, " to ", batches - 1));
  }
  const int64_t samples = data::BatchOf(range, rules_.batch_size, push.lease_batch()).size();
  if (push.num_samples() > samples) {
    return absl::InvalidArgumentError(
        absl::StrCat(batch, ": num_samples is ", push.num_samples(), ", the batch holds ", samples));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int>> ParameterServerService::CallerRank(const grpc::CallbackServerContext& context,
                                                                      absl::string_view method) const {
  return WorkerOf(SessionCredentialOf(context), method);
}

absl::StatusOr<std::optional<int>> ParameterServerService::WorkerOf(absl::string_view credential,
                                                                    absl::string_view method) const {
  // sessions_ is published by the release store of store_.
  if (std::atomic_load(&store_) == nullptr || sessions_ == nullptr) return std::nullopt;
  absl::StatusOr<SessionClaims> caller = sessions_->Verify(credential);
  if (!caller.ok()) return absl::Status(caller.status().code(), absl::StrCat(method, ": ", caller.status().message()));
  if (caller->role != WORKER) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, ": ", DescribeCaller(*caller), " may not call a parameter server; only workers do"));
  }
  return caller->rank;
}

absl::Status ParameterServerService::Admit(absl::string_view method, absl::string_view credential,
                                           const Peer& peer) const {
  // gRPC health needs no session. Anything else, a method of no service here included, is read
  // only for a worker's certificate and a worker's session.
  if (absl::StartsWith(method, kHealthServicePrefix)) return absl::OkStatus();
  absl::ConsumePrefix(&method, "/pstrain.ParameterServer/");
  absl::Status caller = WorkerOf(credential, method).status();
  if (caller.ok()) caller = CheckPeerRole(peer, CertRole::kWorker, method);
  if (!caller.ok()) metrics_->RefusedUnread(caller.code());
  return caller;
}

absl::Status ParameterServerService::CheckActsAsWorker(std::optional<int> caller, int worker_rank,
                                                       absl::string_view method) {
  if (!caller.has_value()) return absl::OkStatus();
  return CheckActsAs(SessionClaims{WORKER, *caller, ""}, WORKER, worker_rank, method);
}

std::shared_ptr<ParameterStore> ParameterServerService::StoreOrFinish(std::optional<int> shard,
                                                                      grpc::ServerUnaryReactor* reactor,
                                                                      ServerMetrics::Call* meter) const {
  std::shared_ptr<ParameterStore> store = std::atomic_load(&store_);
  if (store == nullptr) {
    Refuse(meter, reactor,
           grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready: waiting for the cluster view"));
    return nullptr;
  }
  if (!shard.has_value() || *shard == store->rank()) {
    meter->Route(ServerMetrics::kOwn);
    return store;
  }
  std::shared_ptr<ParameterStore> replica = std::atomic_load(&replica_);
  if (replica != nullptr && *shard == replica->rank()) {
    meter->Route(ServerMetrics::kReplica);
    return replica;
  }
  // After a change of the server count, a call for a shard hosted here before: routed under the
  // old map, like the calls the new stores answer ABORTED.
  const bool replaced = replaced_.load();
  Refuse(meter, reactor,
         grpc::Status(replaced ? grpc::StatusCode::ABORTED : grpc::StatusCode::FAILED_PRECONDITION,
                      absl::StrCat("server ", store->rank(), " does not host shard ", *shard, " (it hosts shard",
                                   replica == nullptr ? absl::StrCat(" ", store->rank())
                                                      : absl::StrCat("s ", store->rank(), " and ", replica->rank()),
                                   replaced ? absl::StrCat(" under shard map version ", store->shard_map_version(),
                                                           "); refresh the cluster view")
                                            : ")")));
  return nullptr;
}

void ParameterServerService::SetLimits(const RequestLimits& limits) { budget_.SetLimits(limits); }

bool ParameterServerService::SizeOkOrFinish(const char* what, const grpc::ByteBuffer& request,
                                            grpc::ServerUnaryReactor* reactor, ServerMetrics::Call* meter) {
  absl::Status s = budget_.CheckSize(what, static_cast<int64_t>(request.Length()));
  if (!s.ok()) Refuse(meter, reactor, ToGrpcStatus(s));
  return s.ok();
}

bool ParameterServerService::AdmitOrFinish(const char* what, grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer& request, size_t answer_bytes, bool reading,
                                           grpc::ServerUnaryReactor* reactor, ServerMetrics::Call* meter,
                                           InflightBudget::Ticket* ticket) {
  const auto request_bytes = static_cast<int64_t>(request.Length());
  absl::StatusOr<InflightBudget::Ticket> admitted =
      budget_.Admit(what, request_bytes + static_cast<int64_t>(answer_bytes), reading);
  if (!admitted.ok()) {
    context->AddTrailingMetadata(kRetryAfterMsKey, absl::StrCat(absl::ToInt64Milliseconds(budget_.retry_after())));
    Refuse(meter, reactor, ToGrpcStatus(admitted.status()));
    return false;
  }
  *ticket = *std::move(admitted);
  return true;
}

bool ParameterServerService::CallerOkOrFinish(const absl::Status& caller, grpc::ServerUnaryReactor* reactor,
                                              ServerMetrics::Call* meter) {
  if (!caller.ok()) Refuse(meter, reactor, ToGrpcStatus(caller));
  return caller.ok();
}

std::shared_ptr<ParameterStore> ParameterServerService::DecodePushOrFinish(
    std::optional<int> caller, absl::string_view method, const grpc::ByteBuffer& request, IncomingPush* push,
    grpc::ServerUnaryReactor* reactor, ServerMetrics::Call* meter) const {
  absl::Status s = DecodePush(request, "push", push);
  if (s.ok()) s = CheckActsAsWorker(caller, push->header.worker_rank(), method);
  if (s.ok()) s = CheckLeaseGrant(push->header, method);
  if (!s.ok()) {
    Refuse(meter, reactor, ToGrpcStatus(s));
    return nullptr;
  }
  return StoreOrFinish(ShardOf(push->header), reactor, meter);
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CountRequest(&pull_, request->Length());
  ServerMetrics::Call meter(metrics_, RpcMethod::kPull, static_cast<int64_t>(request->Length()));
  absl::StatusOr<std::optional<int>> caller = CallerRank(*context, "Pull");
  if (!CallerOkOrFinish(caller.status(), reactor, &meter) || !SizeOkOrFinish("pull", *request, reactor, &meter)) {
    return reactor;
  }
  IncomingPullRequest req;
  absl::Status s = DecodePullRequest(*request, "pull", &req);
  if (s.ok()) s = CheckActsAsWorker(*caller, req.header.worker_rank(), "Pull");
  if (!s.ok()) {
    Refuse(&meter, reactor, ToGrpcStatus(s));
    return reactor;
  }
  std::shared_ptr<ParameterStore> store = StoreOrFinish(ShardOf(req.header), reactor, &meter);
  if (store == nullptr) return reactor;
  const size_t answer_bytes = 4 * static_cast<size_t>(store->num_elements());
  InflightBudget::Ticket ticket;
  if (!AdmitOrFinish("pull", context, *request, answer_bytes, /*reading=*/true, reactor, &meter, &ticket)) {
    return reactor;
  }
  auto* answer = new RawAnswer(meter);
  answer->ticket = std::move(ticket);
  answer->values = BufferPool::Default().Acquire(answer_bytes);
  float* values = answer->values.floats();
  store->Pull(DecodedPull::Of(req), PullAnswer{&answer->header, values, &answer->rows},
              [this, reactor, answer, response](absl::Status status) {
                std::unique_ptr<RawAnswer> owned(answer);
                if (status.ok()) {
                  EncodePull(owned->header, std::move(owned->values), std::move(owned->rows), response);
                  CountResponse(&pull_, response->Length());
                }
                Answer(&owned->meter, status, *response, reactor);
              });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CountRequest(&push_, request->Length());
  ServerMetrics::Call meter(metrics_, RpcMethod::kPush, static_cast<int64_t>(request->Length()));
  absl::StatusOr<std::optional<int>> caller = CallerRank(*context, "Push");
  if (!CallerOkOrFinish(caller.status(), reactor, &meter) || !SizeOkOrFinish("push", *request, reactor, &meter)) {
    return reactor;
  }
  IncomingPush push;
  std::shared_ptr<ParameterStore> store = DecodePushOrFinish(*caller, "Push", *request, &push, reactor, &meter);
  if (store == nullptr) return reactor;
  InflightBudget::Ticket ticket;
  if (!AdmitOrFinish("push", context, *request, 0, /*reading=*/false, reactor, &meter, &ticket)) return reactor;
  auto* answer = new RawAnswer(meter);
  answer->ticket = std::move(ticket);
  store->Push(DecodedPush::Of(push), &answer->pushed, [this, reactor, answer, response](absl::Status status) {
    std::unique_ptr<RawAnswer> owned(answer);
    if (status.ok()) {
      EncodeMessage(owned->pushed, response);
      CountResponse(&push_, response->Length());
    }
    Answer(&owned->meter, status, *response, reactor);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::PushPull(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CountRequest(&push_pull_, request->Length());
  ServerMetrics::Call meter(metrics_, RpcMethod::kPushPull, static_cast<int64_t>(request->Length()));
  absl::StatusOr<std::optional<int>> caller = CallerRank(*context, "PushPull");
  if (!CallerOkOrFinish(caller.status(), reactor, &meter) || !SizeOkOrFinish("push-pull", *request, reactor, &meter)) {
    return reactor;
  }
  IncomingPush push;
  std::shared_ptr<ParameterStore> store = DecodePushOrFinish(*caller, "PushPull", *request, &push, reactor, &meter);
  if (store == nullptr) return reactor;
  const size_t answer_bytes = AnswerBytes(push.header, *store);
  InflightBudget::Ticket ticket;
  if (!AdmitOrFinish("push-pull", context, *request, answer_bytes, /*reading=*/false, reactor, &meter, &ticket)) {
    return reactor;
  }
  auto* answer = new RawAnswer(meter);
  answer->ticket = std::move(ticket);
  answer->values = BufferPool::Default().Acquire(answer_bytes);
  float* values = answer->values.floats();
  store->PushPull(DecodedPush::Of(push), PullAnswer{&answer->header, values, &answer->rows},
                  [this, reactor, answer, response](absl::Status status) {
                    std::unique_ptr<RawAnswer> owned(answer);
                    if (status.ok()) {
                      EncodePull(owned->header, std::move(owned->values), std::move(owned->rows), response);
                      CountResponse(&push_pull_, response->Length());
                    }
                    Answer(&owned->meter, status, *response, reactor);
                  });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::FinishEpoch(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  // Its few bytes are not counted (as in TransportCounters); its requests, answers and time are.
  ServerMetrics::Call meter(metrics_, RpcMethod::kFinishEpoch, 0);
  absl::StatusOr<std::optional<int>> caller = CallerRank(*context, "FinishEpoch");
  if (!caller.ok()) {  // The default reactor only then: ServeParsed brings its own.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    CallerOkOrFinish(caller.status(), reactor, &meter);
    return reactor;
  }
  bool parsed = false;
  grpc::ServerUnaryReactor* reactor =
      ServeParsed<FinishEpochRequest, FinishEpochResponse>(request, response, "FinishEpoch", [&](auto* call) {
        parsed = true;
        absl::Status s = CheckActsAsWorker(*caller, call->request.worker_rank(), "FinishEpoch");
        if (s.ok()) {
          std::shared_ptr<ParameterStore> store = StoreOrFinish(ShardOf(call->request), call, &meter);
          if (store == nullptr) return;
          s = store->FinishEpoch(call->request);
        }
        if (s.ok()) {
          meter.Answered(0);
        } else {
          meter.Refused(s.code());
        }
        call->Reply(s);
      });
  // ServeParsed answered a request that does not parse itself.
  if (!parsed) meter.Refused(absl::StatusCode::kInvalidArgument);
  return reactor;
}

}  // namespace pstrain::server
