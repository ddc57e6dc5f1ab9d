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

ParameterStore::Done FinishWith(grpc::ServerUnaryReactor* reactor) {
  return [reactor](absl::Status status) { reactor->Finish(ToGrpcStatus(status)); };
}

template <typename Request>
std::optional<int> ShardOf(const Request& request) {
  if (!request.has_shard()) return std::nullopt;
  return request.shard();
}

// Small messages (a PullRequest, a PushResponse) go through protobuf as usual.
bool ParseSmall(const grpc::ByteBuffer& in, google::protobuf::MessageLite* message) {
  std::vector<grpc::Slice> slices;
  if (!in.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return message->ParseFromString(bytes);
}

void SerializeSmall(const google::protobuf::MessageLite& message, grpc::ByteBuffer* out) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes.data(), bytes.size());
  grpc::ByteBuffer buffer(&slice, 1);
  out->Swap(&buffer);
}

// The state of one raw call, alive until its answer is encoded.
struct RawCall {
  IncomingPush push;
  PullResponse header;    // the answer, without the values
  PushResponse pushed;    // Push's answer
  PooledBuffer values;    // the answer's values
};

// Room for the answer to `push`: the floats of its chunks, which a valid push (checked by the
// store) matches exactly; never more than the store holds, whatever the lengths claim.
size_t AnswerBytes(const PushRequest& push, const ParameterStore& store) {
  int64_t floats = 0;
  for (const TensorChunk& c : push.chunks()) floats += std::max<int64_t>(c.length(), 0);
  return 4 * static_cast<size_t>(std::min(floats, store.num_elements()));
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

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  PullRequest req;
  if (!ParseSmall(*request, &req)) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "pull: the request is not a valid PullRequest"));
    return reactor;
  }
  ParameterStore* store = StoreOrFinish(ShardOf(req), reactor);
  if (store == nullptr) return reactor;
  auto* call = new RawCall;
  call->values = BufferPool::Default().Acquire(4 * static_cast<size_t>(store->num_elements()));
  float* values = call->values.floats();
  store->Pull(
      req, &call->header,
      [reactor, call, response](absl::Status status) {
        std::unique_ptr<RawCall> owned(call);
        if (status.ok()) EncodePull(owned->header, std::move(owned->values), response);
        reactor->Finish(ToGrpcStatus(status));
      },
      values);
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto call = std::make_unique<RawCall>();
  if (absl::Status s = DecodePush(*request, "push", &call->push); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  ParameterStore* store = StoreOrFinish(ShardOf(call->push.header), reactor);
  if (store == nullptr) return reactor;
  RawCall* raw = call.release();
  store->Push(raw->push.header, raw->push.values, &raw->pushed, [reactor, raw, response](absl::Status status) {
    std::unique_ptr<RawCall> owned(raw);
    if (status.ok()) SerializeSmall(owned->pushed, response);
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::PushPull(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto call = std::make_unique<RawCall>();
  if (absl::Status s = DecodePush(*request, "push", &call->push); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  ParameterStore* store = StoreOrFinish(ShardOf(call->push.header), reactor);
  if (store == nullptr) return reactor;
  call->values = BufferPool::Default().Acquire(AnswerBytes(call->push.header, *store));
  RawCall* raw = call.release();
  store->PushPull(
      raw->push.header, raw->push.values, &raw->header,
      [reactor, raw, response](absl::Status status) {
        std::unique_ptr<RawCall> owned(raw);
        if (status.ok()) EncodePull(owned->header, std::move(owned->values), response);
        reactor->Finish(ToGrpcStatus(status));
      },
      raw->values.floats());
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
