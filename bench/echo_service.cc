#include "bench/echo_service.h"

#include <string>

namespace pstrain::bench {

EchoService::EchoService(int64_t payload_bytes) : payload_(static_cast<size_t>(payload_bytes), '\x01') {}

grpc::ServerUnaryReactor* EchoService::Echo(grpc::CallbackServerContext* context, const EchoMessage* request,
                                            EchoMessage* response) {
  // A copy, not a swap: the parameter server also copies the bytes it answers with.
  response->set_data(request->data());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* EchoService::Send(grpc::CallbackServerContext* context, const EchoMessage* request,
                                            SendReply* response) {
  response->set_size(static_cast<int64_t>(request->data().size()));
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* EchoService::Fetch(grpc::CallbackServerContext* context, const FetchRequest* request,
                                             EchoMessage* response) {
  auto* reactor = context->DefaultReactor();
  if (request->size() < 0 || request->size() > static_cast<int64_t>(payload_.size())) {
    reactor->Finish(grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "fetch of " + std::to_string(request->size()) +
                                                                     " bytes: expected [0, " +
                                                                     std::to_string(payload_.size()) + "]"));
    return reactor;
  }
  response->set_data(payload_.data(), static_cast<size_t>(request->size()));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pstrain::bench
