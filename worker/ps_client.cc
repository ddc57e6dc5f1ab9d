#include "worker/ps_client.h"

#include <utility>

#include <glog/logging.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/grpc_status.h"
#include "common/host_id.h"
#include "common/session_metadata.h"

namespace pstrain::worker {

struct PsClient::Call {
  grpc::ClientContext context;
  grpc::ByteBuffer request;   // raw calls: the encoded request
  grpc::ByteBuffer response;  // and the answer's bytes
  std::string what;
  Done done;
  const void* group = nullptr;  // for CancelGroup
};

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
  std::unique_ptr<PsClient> client(
      new PsClient(rpc_timeout, unix_sockets ? HostId() : "", tcp_connections, std::move(security),
                   std::move(session_credential)));
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
      session_credential_(std::move(session_credential)) {}

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
    std::shared_ptr<grpc::Channel> channel = security_->NewChannel(address, args);
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
  // Callbacks of cancelled calls still run on gRPC threads; wait until none is left.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](PsClient* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->in_flight_.empty() && c->ending_ == 0; },
      this));
}

PsClient::Call* PsClient::Begin(int server, const char* what, Done done, const void* group) {
  if (server < 0 || server >= num_servers() || servers_[server]->channels.empty()) {
    done(absl::UnavailableError(absl::StrCat(what, " to server ", server, ": not in the cluster view")));
    return nullptr;
  }
  auto call = std::make_unique<Call>();
  call->what = absl::StrCat(what, " to server ", server, " at ", servers_[server]->address);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
  AttachSession(&call->context, session_credential_);
  call->done = std::move(done);
  call->group = group;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_.empty()) {
      Call* raw = call.release();
      in_flight_.insert(raw);
      return raw;
    }
  }
  call->done(absl::CancelledError(absl::StrCat(call->what, ": ", cancelled_)));
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
  auto finished = [this, call, decode = std::move(decode)](grpc::Status s) {
    if (s.ok()) {
      absl::Status decoded = decode(call->response);
      if (!decoded.ok()) s = grpc::Status(grpc::StatusCode::DATA_LOSS, std::string(decoded.message()));
    }
    End(call, s);
  };
  NextChannel(server).raw->UnaryCall(&call->context, method, grpc::StubOptions(), &call->request, &call->response,
                                     std::move(finished));
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
  StartRaw(server, call, kPushMethod,
           [response](const grpc::ByteBuffer& bytes) { return DecodeMessage(bytes, "answer", response); });
}

void PsClient::PushPullAsync(int server, const OutgoingPush* request, IncomingPull* response, Done done,
                             const void* group) {
  Call* call = Begin(server, "push-pull", std::move(done), group);
  if (call == nullptr) return;
  EncodePush(*request, &call->request);
  StartRaw(server, call, kPushPullMethod,
           [response](const grpc::ByteBuffer& bytes) { return DecodePull(bytes, "answer", response); });
}

void PsClient::FinishEpochAsync(int server, const FinishEpochRequest* request,
                                FinishEpochResponse* response, Done done) {
  Call* call = Begin(server, "finish-epoch", std::move(done));
  if (call == nullptr) return;
  NextChannel(server).typed->async()->FinishEpoch(&call->context, request, response,
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

absl::Status PsClient::PushPullAll(const std::vector<OutgoingPush>& requests,
                                   std::vector<IncomingPull>* responses) {
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
    if (call->group == group) call->context.TryCancel();
  }
}

void PsClient::CancelAll(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.empty()) cancelled_ = reason.empty() ? "cancelled" : reason;
  // TryCancel makes each call end with CANCELLED through its own callback, which erases it.
  for (Call* call : in_flight_) call->context.TryCancel();
}

}  // namespace pstrain::worker
