// The bare gRPC echo service of bench/echo.proto: the baseline the parameter server's rpcs are
// measured against. Handlers copy bytes and nothing else, on the callback API like
// server/ps_service.h, so both sides pay the same gRPC costs.
//
// Thread safety: all handlers may run concurrently; the payload is constant after construction.
#ifndef PSTRAIN_BENCH_ECHO_SERVICE_H_
#define PSTRAIN_BENCH_ECHO_SERVICE_H_

#include <cstdint>
#include <string>

#include <grpcpp/grpcpp.h>

#include "bench/echo.grpc.pb.h"

namespace pstrain::bench {

class EchoService final : public Echo::CallbackService {
 public:
  // Fetch answers with up to `payload_bytes` bytes (a larger request is OUT_OF_RANGE).
  explicit EchoService(int64_t payload_bytes);
  EchoService(const EchoService&) = delete;
  EchoService& operator=(const EchoService&) = delete;

  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context, const EchoMessage* request,
                                 EchoMessage* response) override;
  grpc::ServerUnaryReactor* Send(grpc::CallbackServerContext* context, const EchoMessage* request,
                                 SendReply* response) override;
  grpc::ServerUnaryReactor* Fetch(grpc::CallbackServerContext* context, const FetchRequest* request,
                                  EchoMessage* response) override;

 private:
  // What Fetch copies from, as a Pull copies the weights.
  const std::string payload_;
};

}  // namespace pstrain::bench

#endif  // PSTRAIN_BENCH_ECHO_SERVICE_H_
