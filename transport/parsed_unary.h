// A typed unary gRPC method served over raw bytes, so that a request that does not parse gets
// INVALID_ARGUMENT with a message naming the method and the type.
//
// Why: gRPC's callback API answers a request it cannot deserialize with UNIMPLEMENTED and no
// message, as if the method did not exist, which tells a client nothing about its bug. Registering
// the method raw (Service::WithRawCallbackMethod_X) and parsing here keeps the wire exactly the
// same while the answer says what was wrong:
//
//   grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext*, const grpc::ByteBuffer* in,
//                                      grpc::ByteBuffer* out) override {
//     return ServeParsed<RegisterRequest, RegisterResponse>(in, out, "Register", [this](auto* call) {
//       call->Reply(core_->Register(call->request));
//     });
//   }
//
// The handler gets a ParsedCall holding the parsed request and the response to fill, and must
// call Reply exactly once, at once or later from any thread (a parked call); the call stays alive
// until then.
#ifndef PSTRAIN_TRANSPORT_PARSED_UNARY_H_
#define PSTRAIN_TRANSPORT_PARSED_UNARY_H_

#include <utility>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "transport/grpc_status.h"
#include "transport/tensor_wire.h"

namespace pstrain {

template <typename Request, typename Response>
class ParsedCall final : public grpc::ServerUnaryReactor {
 public:
  explicit ParsedCall(grpc::ByteBuffer* out) : out_(out) {}

  Request request;
  Response response;

  // Finishes the call: with OK, `response` is what goes back.
  void Reply(const absl::Status& status) {
    if (status.ok()) EncodeMessage(response, out_);
    Finish(ToGrpcStatus(status));
  }
  // Finishes with `result`'s value as the response, or its error.
  void Reply(absl::StatusOr<Response> result) {
    if (!result.ok()) return Reply(result.status());
    response = *std::move(result);
    Reply(absl::OkStatus());
  }

  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer* const out_;
};

template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* ServeParsed(const grpc::ByteBuffer* in, grpc::ByteBuffer* out, absl::string_view method,
                                      Handler&& handle) {
  auto* call = new ParsedCall<Request, Response>(out);
  const absl::Status parsed = DecodeMessage(*in, absl::StrCat(method, " request"), &call->request);
  if (!parsed.ok()) {
    call->Finish(ToGrpcStatus(parsed));
    return call;
  }
  std::forward<Handler>(handle)(call);
  return call;
}

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_PARSED_UNARY_H_
