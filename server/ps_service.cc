#include "server/ps_service.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/buffer_pool.h"
#include "common/grpc_status.h"
#include "common/tensor_wire.h"
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
  PullResponse header;    // the answer, without the values
  PushResponse pushed;    // Push's answer
  PooledBuffer values;    // the answer's values
};

// Room for the answer to `push`: the floats of its chunks, which a valid push (checked by the
// store) matches exactly; never more than the store holds, whatever the lengths claim.
size_t AnswerBytes(const PushRequest& push, const ParameterStore& store) {
  const int64_t most = store.num_elements();
  int64_t floats = 0;
  for (const TensorChunk& c : push.chunks()) floats = std::min(most, floats + std::clamp<int64_t>(c.length(), 0, most));
  return 4 * static_cast<size_t>(floats);
}

}  // namespace

void ParameterServerService::SetStores(ParameterStore* own, ParameterStore* replica) {
  CHECK(own != nullptr);
  CHECK(replica == nullptr || replica->rank() != own->rank()) << "a replica of the server's own shard";
  replica_.store(replica, std::memory_order_release);
  ParameterStore* expected = nullptr;
  CHECK(store_.compare_exchange_strong(expected, own)) << "SetStore called twice";
}

ParameterStore* ParameterServerService::StoreOrFinish(std::optional<int> shard,
                                                      grpc::ServerUnaryReactor* reactor) const {
  ParameterStore* store = store_.load(std::memory_order_acquire);
  if (store == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready: waiting for the cluster view"));
    return nullptr;
  }
  if (!shard.has_value() || *shard == store->rank()) return store;
  ParameterStore* replica = replica_.load(std::memory_order_acquire);
  if (replica != nullptr && *shard == replica->rank()) return replica;
  reactor->Finish(grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      absl::StrCat("server ", store->rank(), " does not host shard ", *shard, " (it hosts shard",
                   replica == nullptr ? absl::StrCat(" ", store->rank())
                                      : absl::StrCat("s ", store->rank(), " and ", replica->rank()),
                   ")")));
  return nullptr;
}

ParameterStore* ParameterServerService::DecodePushOrFinish(const grpc::ByteBuffer& request, IncomingPush* push,
                                                          grpc::ServerUnaryReactor* reactor) const {
  if (absl::Status s = DecodePush(request, "push", push); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return nullptr;
  }
  return StoreOrFinish(ShardOf(push->header), reactor);
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  PullRequest req;
  if (absl::Status s = DecodeMessage(*request, "pull", &req); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  ParameterStore* store = StoreOrFinish(ShardOf(req), reactor);
  if (store == nullptr) return reactor;
  auto* answer = new RawAnswer;
  answer->values = BufferPool::Default().Acquire(4 * static_cast<size_t>(store->num_elements()));
  float* values = answer->values.floats();
  store->Pull(
      req, &answer->header,
      [reactor, answer, response](absl::Status status) {
        std::unique_ptr<RawAnswer> owned(answer);
        if (status.ok()) EncodePull(owned->header, std::move(owned->values), response);
        reactor->Finish(ToGrpcStatus(status));
      },
      values);
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  IncomingPush push;
  ParameterStore* store = DecodePushOrFinish(*request, &push, reactor);
  if (store == nullptr) return reactor;
  auto* answer = new RawAnswer;
  store->Push(push.header, push.values, &answer->pushed, [reactor, answer, response](absl::Status status) {
    std::unique_ptr<RawAnswer> owned(answer);
    if (status.ok()) EncodeMessage(owned->pushed, response);
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::PushPull(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  IncomingPush push;
  ParameterStore* store = DecodePushOrFinish(*request, &push, reactor);
  if (store == nullptr) return reactor;
  auto* answer = new RawAnswer;
  answer->values = BufferPool::Default().Acquire(AnswerBytes(push.header, *store));
  float* values = answer->values.floats();
  store->PushPull(
      push.header, push.values, &answer->header,
      [reactor, answer, response](absl::Status status) {
        std::unique_ptr<RawAnswer> owned(answer);
        if (status.ok()) EncodePull(owned->header, std::move(owned->values), response);
        reactor->Finish(ToGrpcStatus(status));
      },
      values);
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::FinishEpoch(grpc::CallbackServerContext* context,
                                                              const FinishEpochRequest* request,
                                                              FinishEpochResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (ParameterStore* store = StoreOrFinish(ShardOf(*request), reactor)) reactor->Finish(ToGrpcStatus(store->FinishEpoch(*request)));
  return reactor;
}

}  // namespace pstrain::server
