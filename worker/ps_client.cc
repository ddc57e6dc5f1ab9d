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
                                                          bool unix_sockets) {
  std::unique_ptr<PsClient> client(new PsClient(rpc_timeout, unix_sockets ? HostId() : ""));
  std::vector<std::string>& addresses = client->addresses_;
  for (int i = 0; i < view.servers_size(); ++i) {
    const int rank = view.servers(i).rank();
    if (rank < static_cast<int>(addresses.size())) {
      return absl::InvalidArgumentError(absl::StrCat("cluster view: server at position ", i, " has rank ", rank,
                                                     ", expected ranks >= 0 in ascending order"));
    }
    addresses.resize(rank + 1);
    addresses[rank] = client->DialAddress(view.servers(i));
  }
  if (addresses.empty()) return absl::InvalidArgumentError("cluster view lists no servers");
  for (const std::string& address : addresses) {
    client->stubs_.push_back(address.empty() ? Stubs() : Connect(address));
    if (absl::StartsWith(address, "unix:")) LOG(INFO) << "a server on this host: dialling " << address;
  }
  return client;
}

PsClient::PsClient(absl::Duration rpc_timeout, std::string host_id)
    : rpc_timeout_(rpc_timeout), host_id_(std::move(host_id)) {}

PsClient::Stubs PsClient::Connect(const std::string& address) {
  grpc::ChannelArguments args;
  // Tensors can be large: lift gRPC's 4 MiB default on what we receive.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A channel of its own per server, not a subchannel shared through the global pool.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  return Stubs{ParameterServer::NewStub(channel), std::make_unique<GenericStub>(channel)};
}

void PsClient::UpdateServers(const ClusterView& view) {
  for (const ServerInfo& server : view.servers()) {
    const int rank = server.rank();
    if (rank < 0) continue;
    if (rank >= num_servers()) {
      addresses_.resize(rank + 1);
      stubs_.resize(rank + 1);
    }
    const std::string address = DialAddress(server);
    if (addresses_[rank] == address) continue;
    LOG(INFO) << "server " << rank << " moved from " << addresses_[rank] << " to " << address;
    addresses_[rank] = address;
    stubs_[rank] = Connect(address);
  }
}

PsClient::~PsClient() {
  CancelAll("worker shutting down");
  // Callbacks of cancelled calls still run on gRPC threads; wait until none is left.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](absl::flat_hash_set<Call*>* calls) { return calls->empty(); }, &in_flight_));
}

PsClient::Call* PsClient::Begin(int server, const char* what, Done done, const void* group) {
  if (server < 0 || server >= num_servers() || stubs_[server].typed == nullptr) {
    done(absl::UnavailableError(absl::StrCat(what, " to server ", server, ": not in the cluster view")));
    return nullptr;
  }
  auto call = std::make_unique<Call>();
  call->what = absl::StrCat(what, " to server ", server, " at ", addresses_[server]);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
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
  owned->done(std::move(result));
}

namespace {

constexpr char kPullMethod[] = "/pstrain.ParameterServer/Pull";
constexpr char kPushMethod[] = "/pstrain.ParameterServer/Push";
constexpr char kPushPullMethod[] = "/pstrain.ParameterServer/PushPull";

}  // namespace

void PsClient::StartRaw(int server, Call* call, const char* method,
                        std::function<absl::Status(const grpc::ByteBuffer&)> decode) {
  stubs_[server].raw->UnaryCall(&call->context, method, grpc::StubOptions(), &call->request, &call->response,
                                [this, call, decode = std::move(decode)](grpc::Status s) {
                                  if (s.ok()) {
                                    absl::Status decoded = decode(call->response);
                                    if (!decoded.ok()) {
                                      s = grpc::Status(grpc::StatusCode::DATA_LOSS, std::string(decoded.message()));
                                    }
                                  }
                                  End(call, s);
                                });
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
  stubs_[server].typed->async()->FinishEpoch(&call->context, request, response,
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

namespace {

// Waits for `calls` callbacks that write into `results`; the first error in `results` order.
class Gather {
 public:
  Gather(int slots, int calls) : results_(slots), pending_(calls) {}
  PsClient::Done Slot(int i) {
    return [this, i](absl::Status s) {
      results_[i] = std::move(s);
      pending_.DecrementCount();
    };
  }
  absl::Status Wait() {
    pending_.Wait();
    for (absl::Status& s : results_) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<absl::Status> results_;
  absl::BlockingCounter pending_;
};

}  // namespace

absl::Status PsClient::PullShards(const std::vector<ShardRoute>& routes, const std::vector<PullRequest>& requests,
                                  std::vector<IncomingPull>* responses) {
  const int n = static_cast<int>(requests.size());
  responses->resize(n);
  Gather gather(n, n);
  for (int i = 0; i < n; ++i) PullAsync(routes[i].primary, &requests[i], &(*responses)[i], gather.Slot(i));
  return gather.Wait();
}

absl::Status PsClient::PushPullShards(const std::vector<ShardRoute>& routes,
                                      const std::vector<OutgoingPush>& requests,
                                      std::vector<IncomingPull>* responses) {
  const int n = static_cast<int>(requests.size());
  responses->resize(n);
  int calls = n;
  for (int i = 0; i < n; ++i) calls += routes[i].backup >= 0 ? 1 : 0;
  std::vector<PushResponse> backup_responses(n);
  Gather gather(2 * n, calls);
  // Both calls of a shard read the same request, so the gradient is not copied.
  for (int i = 0; i < n; ++i) {
    PushPullAsync(routes[i].primary, &requests[i], &(*responses)[i], gather.Slot(i));
    if (routes[i].backup >= 0) PushAsync(routes[i].backup, &requests[i], &backup_responses[i], gather.Slot(n + i));
  }
  return gather.Wait();
}

absl::Status PsClient::FinishEpochShards(const std::vector<ShardRoute>& routes,
                                         const std::vector<FinishEpochRequest>& requests) {
  const int n = static_cast<int>(requests.size());
  int calls = n;
  for (int i = 0; i < n; ++i) calls += routes[i].backup >= 0 ? 1 : 0;
  std::vector<FinishEpochResponse> responses(2 * n);
  Gather gather(2 * n, calls);
  for (int i = 0; i < n; ++i) {
    FinishEpochAsync(routes[i].primary, &requests[i], &responses[i], gather.Slot(i));
    if (routes[i].backup >= 0) FinishEpochAsync(routes[i].backup, &requests[i], &responses[n + i], gather.Slot(n + i));
  }
  return gather.Wait();
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
