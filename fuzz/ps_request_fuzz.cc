// Each parameter-server RPC's request validation (server/parameter_store.h), in process: a
// sequence of Push, PushPull, Pull and FinishEpoch requests, decoded from the fuzzed bytes exactly
// as server/ps_service.cc decodes what it receives, fed to a fresh store of a small job (small_store.h).
// A bad request must be answered with an error status, never crash the server or corrupt it for
// the requests after it.
//
// Input: byte 0 the mode (SYNC, ASYNC, SSP); then frames (fuzz_util.h): tag % 4 = 0 Push,
// 1 PushPull, 2 Pull, 3 FinishEpoch; the body is the request's wire bytes.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "transport/tensor_wire.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/small_store.h"
#include "proto/ps.pb.h"

namespace {

grpc::ByteBuffer Buffer(absl::string_view body) {
  grpc::Slice slice(body.data(), body.size());
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const pstrain::Mode modes[] = {pstrain::SYNC, pstrain::ASYNC, pstrain::SSP};
  // Answers outlive the store: a parked request's `done` runs when the store shuts down.
  std::deque<pstrain::PullResponse> pulled;
  std::deque<pstrain::PushResponse> pushed;
  std::unique_ptr<pstrain::server::ParameterStore> store = pstrain::fuzz::SmallStore(modes[data[0] % 3]);
  auto ignore = [](absl::Status) {};

  pstrain::fuzz::FrameReader frames(data + 1, size - 1);
  uint8_t tag;
  absl::string_view body;
  while (frames.Next(&tag, &body)) {
    const grpc::ByteBuffer in = Buffer(body);
    switch (tag % 4) {
      case 0:
      case 1: {
        pstrain::IncomingPush push;
        if (!pstrain::DecodePush(in, "push", &push).ok()) break;
        if (tag % 4 == 0) {
          store->Push(pstrain::server::DecodedPush::Of(push), &pushed.emplace_back(), ignore);
        } else {
          store->PushPull(pstrain::server::DecodedPush::Of(push), pstrain::server::PullAnswer{&pulled.emplace_back()},
                          ignore);
        }
        break;
      }
      case 2: {
        pstrain::PullRequest request;
        if (!pstrain::DecodeMessage(in, "pull", &request).ok()) break;
        store->Pull(request, &pulled.emplace_back(), ignore);
        break;
      }
      case 3: {
        pstrain::FinishEpochRequest request;
        if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) break;
        (void)store->FinishEpoch(request);
        break;
      }
    }
  }
  (void)store->Checkpoint();
  store.reset();
  return 0;
}
