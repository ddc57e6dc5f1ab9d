// The plaintext health port (transport/health.h, HealthServer) on arbitrary request bytes, sent as one
// grpc.health.v1.Health/Check call to a real HealthServer of this process over loopback. What
// parses the request there is gRPC's framing and the generated HealthCheckRequest parser, neither
// ours (and gRPC's is not instrumented); what is ours is the listener's contract, checked for every
// input:
//   - more than 512 bytes: RESOURCE_EXHAUSTED, never read further;
//   - otherwise an answer: OK with a HealthCheckResponse (NOT_SERVING for the overall status,
//     service "": the listener is never marked serving here), or INVALID_ARGUMENT (not a request)
//     or NOT_FOUND (an unknown service); never a crash, a hang or another error (which of the
//     two parsers, upb in gRPC or protobuf here, accepts odd bytes is theirs to decide);
// and after each input a well-formed check still answers. The generated parser of health.proto,
// which this build compiles with the sanitizers, is also run on the bytes directly.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/synchronization/notification.h"
#include "google/protobuf/stubs/logging.h"
#include "transport/health.h"
#include "fuzz/fuzz_util.h"
#include "glog/logging.h"
#include "proto/health.grpc.pb.h"

namespace {

constexpr size_t kMaxRequestBytes = 512;  // transport/health.cc

struct Target {
  std::unique_ptr<pstrain::HealthServer> server;
  std::shared_ptr<grpc::Channel> channel;
};

Target& Health() {
  static Target* target = [] {
    auto* t = new Target();
    t->server = pstrain::HealthServer::Start("127.0.0.1", 0).value();
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    t->channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(t->server->port()),
                                           grpc::InsecureChannelCredentials(), args);
    return t;
  }();
  return *target;
}

grpc::Status Call(const std::string& bytes, grpc::ByteBuffer* response) {
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::GenericStub stub(Health().channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  return status;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Protobuf logs every string field that is not UTF-8; per input that is noise.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  grpc::health::v1::HealthCheckRequest parsed;
  const bool parses = parsed.ParseFromString(bytes);

  grpc::ByteBuffer response;
  const grpc::Status status = Call(bytes, &response);
  CHECK_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << "the health port did not answer";
  if (size > kMaxRequestBytes) {
    CHECK_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  } else if (status.ok()) {
    // gRPC parses with upb, which disagrees with protobuf at the edges (a service name that is not
    // UTF-8, field numbers out of range): an OK answer must be a HealthCheckResponse, and
    // NOT_SERVING where protobuf reads the overall status.
    grpc::health::v1::HealthCheckResponse answer;
    std::vector<grpc::Slice> slices;
    CHECK(response.Dump(&slices).ok());
    std::string flat;
    for (const grpc::Slice& s : slices) flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
    CHECK(answer.ParseFromString(flat));
    if (parses && parsed.service().empty()) {
      CHECK_EQ(answer.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    }
  } else {
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          status.error_code() == grpc::StatusCode::NOT_FOUND)
        << status.error_code() << ": " << status.error_message();
  }
  // Still answers a well-formed check.
  grpc::ByteBuffer again;
  CHECK(Call("", &again).ok());
  return 0;
}
