#include "server/ps_service.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
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
                                                       const PullRequest* request, PullResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (ParameterStore* store = StoreOrFinish(ShardOf(*request), reactor)) store->Pull(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* context,
                                                       const PushRequest* request, PushResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (ParameterStore* store = StoreOrFinish(ShardOf(*request), reactor)) store->Push(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::PushPull(grpc::CallbackServerContext* context,
                                                           const PushRequest* request, PullResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (ParameterStore* store = StoreOrFinish(ShardOf(*request), reactor)) store->PushPull(*request, response, FinishWith(reactor));
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
