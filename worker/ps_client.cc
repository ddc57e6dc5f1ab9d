#include "worker/ps_client.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <glog/logging.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "transport/grpc_status.h"
#include "common/host_id.h"
#include "transport/session_metadata.h"

namespace pstrain::worker {

struct PsClient::Call {
  // One per attempt: a retry needs a fresh one. Replaced only under mu_ (CancelAll reads it).
  std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
  grpc::ByteBuffer request;   // raw calls: the encoded request, sent again as is by a retry
  grpc::ByteBuffer response;  // and the answer's bytes
  std::string what;
  Done done;
  const void* group = nullptr;  // for CancelGroup
  // Raw calls, for a retry: where and what to call again, and how to decode the answer.
  int server = -1;
  const char* method = nullptr;
  std::function<absl::Status(const grpc::ByteBuffer&)> decode;
  absl::Time deadline;  // of the whole call, retries included
  int retries = 0;
  // Pushes: the bytes compression saved (TrafficMeter), counted with each attempt.
  int64_t saved = 0;
  bool group_cancelled = false;  // CancelGroup hit it while it waited to be retried (mu_)
};

namespace {

// A server that is busy answers RESOURCE_EXHAUSTED with a delay to wait (kRetryAfterMsKey). The
// call is sent again after that delay, at most this many times and within its deadline.
constexpr int kMaxRetries = 50;
// A server's hint is honoured up to this; a larger one is read as this.
constexpr absl::Duration kMaxRetryAfter = absl::Seconds(1);

// A call the server's transport reset for its memory quota carries no hint: wait this long.
constexpr absl::Duration kQuotaResetRetryAfter = absl::Milliseconds(50);

// The server's retry hint, if `status` is a retryable RESOURCE_EXHAUSTED.
std::optional<absl::Duration> RetryAfter(const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) return std::nullopt;
  if (absl::StrContains(status.error_message(), "RST_STREAM with error code 11")) {
    // HTTP/2 ENHANCE_YOUR_CALM: the server's transport reset the call to stay within its memory
    // quota (server/server_runner.h) while others sent it more; the call was never read.
    return kQuotaResetRetryAfter;
  }
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kRetryAfterMsKey);
  int64_t ms = 0;
  if (it == trailers.end() || !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &ms)) {
    return std::nullopt;
  }
  return std::clamp(absl::Milliseconds(ms), absl::Milliseconds(1), kMaxRetryAfter);
}

// What compression kept off the wire: the push's chunks as float32 less the bytes of their values.
int64_t CompressionSaved(const OutgoingPush& push) {
  int64_t saved = 0;
  const int n = std::min<int>(push.header.chunks_size(), static_cast<int>(push.values.size()));
  for (int i = 0; i < n; ++i) {
    saved += 4 * push.header.chunks(i).length() - static_cast<int64_t>(push.values[i].size());
  }
  return std::max<int64_t>(0, saved);
}

}  // namespace

std::string PsClient::DialAddress(const ServerInfo& server) const {
  const LocalEndpoint& local = server.local();
  if (!host_id_.empty() && !local.unix_address().empty() && local.host_id() == host_id_) return local.unix_address();
  return server.address();
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(const ClusterView& view, absl::Duration rpc_timeout,
                                                           bool unix_sockets, int tcp_connections,
                                                           std::shared_ptr<const TransportSecurity> security,
                                                           std::string session_credential) {
  if (tcp_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker client: ", tcp_connections, " TCP connections per server, expected 1 or more"));
  }
  if (security == nullptr) security = TransportSecurity::Loopback();
  std::unique_ptr<PsClient> client(new PsClient(rpc_timeout, unix_sockets ? HostId() : "", tcp_connections,
                                                std::move(security), std::move(session_credential)));
  std::vector<std::unique_ptr<Server>>& servers = client->servers_;
  for (int i = 0; i < view.servers_size(); ++i) {
    const int rank = view.servers(i).rank();
    if (rank < static_cast<int>(servers.size())) {
      return absl::InvalidArgumentError(absl::StrCat("cluster view: server at position ", i, " has rank ", rank,
                                                     ", expected ranks >= 0 in ascending order"));
    }
    while (static_cast<int>(servers.size()) <= rank) servers.push_back(std::make_unique<Server>());
    client->Connect(servers[rank].get(), client->DialAddress(view.servers(i)));
  }
  if (servers.empty()) return absl::InvalidArgumentError("cluster view lists no servers");
  return client;
}

PsClient::PsClient(absl::Duration rpc_timeout, std::string host_id, int tcp_connections,
                   std::shared_ptr<const TransportSecurity> security, std::string session_credential)
    : rpc_timeout_(rpc_timeout),
      host_id_(std::move(host_id)),
      tcp_connections_(tcp_connections),
      security_(std::move(security)),
      session_credential_(std::move(session_credential)),
      retry_thread_([this] { RetryLoop(); }) {}

void PsClient::Connect(Server* server, const std::string& address) const {
  const bool unix_socket = absl::StartsWith(address, "unix:");
  if (unix_socket) LOG(INFO) << "a server on this host: dialling " << address;
  server->address = address;
  server->channels.clear();
  const int n = unix_socket ? 1 : tcp_connections_;
  for (int i = 0; i < n; ++i) {
    grpc::ChannelArguments args;
    // Tensors can be large: lift gRPC's 4 MiB default on what we receive.
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    // A subchannel (so a TCP connection) of each channel's own, not one shared through the
    // global pool; the index makes the channels' arguments differ too, so nothing can take them
    // for the same channel and merge their connections.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("pstrain.connection_index", i);
    std::shared_ptr<grpc::Channel> channel = security_->NewChannel(address, args, CertRole::kServer);
    server->channels.push_back(Stubs{ParameterServer::NewStub(channel), std::make_unique<GenericStub>(channel)});
  }
}

int PsClient::num_connections(int server) const {
  if (server < 0 || server >= num_servers()) return 0;
  return static_cast<int>(servers_[server]->channels.size());
}

PsClient::Stubs& PsClient::NextChannel(int server) {
  Server& s = *servers_[server];
  // Relaxed: the counter only spreads calls, it orders nothing.
  return s.channels[s.next.fetch_add(1, std::memory_order_relaxed) % s.channels.size()];
}

void PsClient::UpdateServers(const ClusterView& view) {
  for (const ServerInfo& info : view.servers()) {
    const int rank = info.rank();
    if (rank < 0) continue;
    while (num_servers() <= rank) servers_.push_back(std::make_unique<Server>());
    Server& server = *servers_[rank];
    const std::string address = DialAddress(info);
    if (server.address == address && !server.channels.empty()) continue;
    LOG(INFO) << "server " << rank << " moved from " << server.address << " to " << address;
    Connect(&server, address);
  }
}

PsClient::~PsClient() {
  CancelAll("worker shutting down");
  {
    // Callbacks of cancelled calls still run on gRPC threads (and the retry thread ends the calls
    // that waited to be retried); wait until none is left.
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PsClient* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->in_flight_.empty() && c->ending_ == 0; },
        this));
    stopping_ = true;
  }
  retry_thread_.join();
}

PsClient::Call* PsClient::Begin(int server, const char* what, Done done, const void* group) {
  if (server < 0 || server >= num_servers() || servers_[server]->channels.empty()) {
    done(absl::UnavailableError(absl::StrCat(what, " to server ", server, ": not in the cluster view")));
    return nullptr;
  }
  auto call = std::make_unique<Call>();
  call->what = absl::StrCat(what, " to server ", server, " at ", servers_[server]->address);
  call->deadline = absl::Now() + rpc_timeout_;
  call->context->set_deadline(absl::ToChronoTime(call->deadline));
  AttachSession(call->context.get(), session_credential_);
  call->done = std::move(done);
  call->group = group;
  std::string cancelled;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_.empty()) {
      Call* raw = call.release();
      in_flight_.insert(raw);
      return raw;
    }
    cancelled = cancelled_;
  }
  call->done(absl::CancelledError(absl::StrCat(call->what, ": ", cancelled)));
  return nullptr;
}

void PsClient::End(Call* call, const grpc::Status& status) {
  bool cancelled_here = false;
  {
    absl::MutexLock lock(&mu_);
    in_flight_.erase(call);
    ++ending_;
    cancelled_here = !cancelled_.empty();
  }
  std::unique_ptr<Call> owned(call);
  absl::Status result = FromGrpcStatus(status, owned->what);
  if (absl::IsCancelled(result) && !cancelled_here) {
    // Not CancelAll: a server shutting down (SIGTERM) cancels the calls it still has. To the
    // trainer that is a server going away, like a refused connection, which replicas or a
    // replacement recover from; CANCELLED would end the worker.
    result = absl::UnavailableError(absl::StrCat(result.message(), " (the server ended the call)"));
  }
  Done done = std::move(owned->done);
  // The call's context holds a reference to its channel: drop it before `done` lets the owner go
  // on and destroy this client, so that the channel is never torn down from under a call that is
  // still being destroyed on this gRPC thread (that tripped a reference count assertion in gRPC).
  owned.reset();
  done(std::move(result));
  absl::MutexLock lock(&mu_);
  --ending_;
}

namespace {

constexpr char kPullMethod[] = "/pstrain.ParameterServer/Pull";
constexpr char kPushMethod[] = "/pstrain.ParameterServer/Push";
constexpr char kPushPullMethod[] = "/pstrain.ParameterServer/PushPull";

}  // namespace

void PsClient::StartRaw(int server, Call* call, const char* method,
                        std::function<absl::Status(const grpc::ByteBuffer&)> decode) {
  call->server = server;
  call->method = method;
  call->decode = std::move(decode);
  SendRaw(call);
}

void PsClient::SendRaw(Call* call) {
  auto finished = [this, call](grpc::Status s) {
    if (s.ok()) {
      if (traffic_ != nullptr) traffic_->Received(call->server, static_cast<int64_t>(call->response.Length()));
      absl::Status decoded = call->decode(call->response);
      if (!decoded.ok()) s = grpc::Status(grpc::StatusCode::DATA_LOSS, std::string(decoded.message()));
    }
    if (!s.ok() && MaybeRetry(call, s)) return;
    End(call, s);
  };
  if (traffic_ != nullptr) traffic_->Sent(call->server, static_cast<int64_t>(call->request.Length()), call->saved);
  NextChannel(call->server)
      .raw->UnaryCall(call->context.get(), call->method, grpc::StubOptions(), &call->request, &call->response,
                      std::move(finished));
}

bool PsClient::MaybeRetry(Call* call, const grpc::Status& status) {
  const std::optional<absl::Duration> after = RetryAfter(status, *call->context);
  if (!after.has_value()) return false;
  const absl::Time at = absl::Now() + *after;
  if (call->retries >= kMaxRetries || at >= call->deadline) return false;
  ++call->retries;
  if (traffic_ != nullptr) traffic_->Retried(absl::StatusCode::kResourceExhausted);
  VLOG(1) << call->what << ": " << status.error_message() << "; retry " << call->retries;
  absl::MutexLock lock(&mu_);
  if (!cancelled_.empty() || stopping_) return false;
  waiting_.emplace_back(at, call);
  return true;
}

void PsClient::RetryLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [at, call] : waiting_) next = std::min(next, at);
    const size_t waiting = waiting_.size();
    // Wakes for a new call to wait, a cancellation, the destructor, or the earliest retry.
    auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (stopping_ || waiting_.size() != waiting || !cancelled_.empty() && !waiting_.empty()) return true;
      for (const auto& [at, call] : waiting_) {
        if (call->group_cancelled) return true;
      }
      return false;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), next);
    const absl::Time now = absl::Now();
    std::vector<Call*> send, end;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      Call* call = it->second;
      if (!cancelled_.empty() || call->group_cancelled) {
        end.push_back(call);
      } else if (it->first <= now) {
        // A fresh context, with the call's original deadline, swapped in under mu_ so CancelAll
        // always cancels the one in use; cancelled before it starts, the call ends at once.
        call->context = std::make_unique<grpc::ClientContext>();
        call->context->set_deadline(absl::ToChronoTime(call->deadline));
        AttachSession(call->context.get(), session_credential_);
        send.push_back(call);
      } else {
        ++it;
        continue;
      }
      it = waiting_.erase(it);
    }
    if (send.empty() && end.empty()) continue;
    mu_.Unlock();
    for (Call* call : send) SendRaw(call);
    for (Call* call : end) End(call, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while waiting to retry"));
    mu_.Lock();
  }
}

void PsClient::PullAsync(int server, const PullRequest* request, IncomingPull* response, Done done) {
  Call* call = Begin(server, "pull", std::move(done));
  if (call == nullptr) return;
  EncodeMessage(*request, &call->request);
  StartRaw(server, call, kPullMethod,
           [response](const grpc::ByteBuffer& bytes) { return DecodePull(bytes, "answer", response); });
}

void PsClient::PushAsync(int server, const OutgoingPush* request, PushResponse* response, Done done,
                         const void* group) {
  Call* call = Begin(server, "push", std::move(done), group);
  if (call == nullptr) return;
  EncodePush(*request, &call->request);
  if (traffic_ != nullptr) call->saved = CompressionSaved(*request);
  StartRaw(server, call, kPushMethod,
           [response](const grpc::ByteBuffer& bytes) { return DecodeMessage(bytes, "answer", response); });
}

void PsClient::PushPullAsync(int server, const OutgoingPush* request, IncomingPull* response, Done done,
                             const void* group) {
  Call* call = Begin(server, "push-pull", std::move(done), group);
  if (call == nullptr) return;
  EncodePush(*request, &call->request);
  if (traffic_ != nullptr) call->saved = CompressionSaved(*request);
  StartRaw(server, call, kPushPullMethod,
           [response](const grpc::ByteBuffer& bytes) { return DecodePull(bytes, "answer", response); });
}

void PsClient::FinishEpochAsync(int server, const FinishEpochRequest* request, FinishEpochResponse* response,
                                Done done) {
  Call* call = Begin(server, "finish-epoch", std::move(done));
  if (call == nullptr) return;
  // Its few bytes are not counted, as on the server (proto/scheduler.proto: WorkerTraffic).
  NextChannel(server).typed->async()->FinishEpoch(call->context.get(), request, response,
                                                  [this, call](grpc::Status s) { End(call, s); });
}

template <typename Request, typename Response, typename Start>
absl::Status PsClient::FanOut(int n, const Request* requests, Response* responses, Start start) {
  std::vector<absl::Status> results(n);
  absl::BlockingCounter pending(n);
  for (int i = 0; i < n; ++i) {
    start(i, &requests[i], &responses[i], [&results, &pending, i](absl::Status s) {
      results[i] = std::move(s);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  for (absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PsClient::PullAll(const std::vector<PullRequest>& requests, std::vector<IncomingPull>* responses) {
  responses->resize(requests.size());
  return FanOut(static_cast<int>(requests.size()), requests.data(), responses->data(),
                [this](int i, const PullRequest* req, IncomingPull* resp, Done done) {
                  PullAsync(i, req, resp, std::move(done));
                });
}

absl::Status PsClient::PushPullAll(const std::vector<OutgoingPush>& requests, std::vector<IncomingPull>* responses) {
  responses->resize(requests.size());
  return FanOut(static_cast<int>(requests.size()), requests.data(), responses->data(),
                [this](int i, const OutgoingPush* req, IncomingPull* resp, Done done) {
                  PushPullAsync(i, req, resp, std::move(done));
                });
}

absl::Status PsClient::FinishEpochAll(const FinishEpochRequest& request) {
  std::vector<FinishEpochRequest> requests(num_servers(), request);
  std::vector<FinishEpochResponse> responses(num_servers());
  return FanOut(num_servers(), requests.data(), responses.data(),
                [this](int i, const FinishEpochRequest* req, FinishEpochResponse* resp, Done done) {
                  FinishEpochAsync(i, req, resp, std::move(done));
                });
}

void PsClient::CancelGroup(const void* group) {
  absl::MutexLock lock(&mu_);
  for (Call* call : in_flight_) {
    if (call->group == group) {
      call->context->TryCancel();
      call->group_cancelled = true;  // ends it if it waits to be retried (RetryLoop)
    }
  }
}

void PsClient::CancelAll(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.empty()) cancelled_ = reason.empty() ? "cancelled" : reason;
  // TryCancel makes each call end with CANCELLED through its own callback, which erases it.
  for (Call* call : in_flight_) call->context->TryCancel();
}

}  // namespace pstrain::worker
