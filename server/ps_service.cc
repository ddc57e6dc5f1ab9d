#include "server/ps_service.h"

#include "common/grpc_status.h"
#include "glog/logging.h"

namespace pstrain::server {
namespace {

ParameterStore::Done FinishWith(grpc::ServerUnaryReactor* reactor) {
  return [reactor](absl::Status status) { reactor->Finish(ToGrpcStatus(status)); };
}

}  // namespace

void ParameterServerService::SetStore(ParameterStore* store) {
  CHECK(store != nullptr);
  ParameterStore* expected = nullptr;
  CHECK(store_.compare_exchange_strong(expected, store)) << "SetStore called twice";
}

ParameterStore* ParameterServerService::StoreOrFinish(grpc::ServerUnaryReactor* reactor) const {
  ParameterStore* store = store_.load(std::memory_order_acquire);
  if (store == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready: waiting for the cluster view"));
  }
  return store;
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* context,
                                                       const PullRequest* request, PullResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (ParameterStore* store = StoreOrFinish(reactor)) store->Pull(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* context,
                                                       const PushRequest* request, PushResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (ParameterStore* store = StoreOrFinish(reactor)) store->Push(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::PushPull(grpc::CallbackServerContext* context,
                                                           const PushRequest* request, PullResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (ParameterStore* store = StoreOrFinish(reactor)) store->PushPull(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::FinishEpoch(grpc::CallbackServerContext* context,
                                                              const FinishEpochRequest* request,
                                                              FinishEpochResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (ParameterStore* store = StoreOrFinish(reactor)) reactor->Finish(ToGrpcStatus(store->FinishEpoch(*request)));
  return reactor;
}

}  // namespace pstrain::server
