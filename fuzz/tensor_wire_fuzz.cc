// The hot path's wire codec (transport/tensor_wire.h) on arbitrary bytes: every message a server or
// worker receives goes through DecodePush, DecodePull or DecodeMessage before anything checks it.
//
// Input: byte 0 picks the slice size (1..256) the rest is cut into, since gRPC hands a message over
// in slices of any size and the decoder must not care where they fall; the rest is the message.
// A decoded push's chunks then go through the chunk codec as the store would run it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "common/chunk_codec.h"
#include "transport/tensor_wire.h"
#include "fuzz/fuzz_util.h"
#include "proto/ps.pb.h"

namespace {

grpc::ByteBuffer Slices(const uint8_t* data, size_t size, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < size; at += piece) {
    slices.emplace_back(data + at, std::min(piece, size - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = size_t{data[0]} + 1;
  const grpc::ByteBuffer in = Slices(data + 1, size - 1, piece);

  pstrain::IncomingPush push;
  if (pstrain::DecodePush(in, "push", &push).ok()) {
    if (push.values.size() != static_cast<size_t>(push.header.chunks_size())) __builtin_trap();
    for (int i = 0; i < push.header.chunks_size(); ++i) {
      const pstrain::TensorChunk& c = push.header.chunks(i);
      if (c.length() < 0 || c.length() > (int64_t{1} << 20)) continue;  // the store caps lengths first
      if (!pstrain::CheckChunkShape(c.encoding(), push.values[i], c.length()).ok()) continue;
      float bad;
      pstrain::FindNonFiniteValue(c.encoding(), push.values[i], c.length(), &bad);
      std::vector<float> dst(c.length());
      pstrain::DecodeChunkValues(c.encoding(), push.values[i], c.length(), dst.data());
    }
  }
  pstrain::IncomingPull pull;
  if (pstrain::DecodePull(in, "pull", &pull).ok()) {
    if (pull.values.size() != static_cast<size_t>(pull.header.chunks_size())) __builtin_trap();
  }
  pstrain::PullRequest request;
  (void)pstrain::DecodeMessage(in, "pull request", &request);
  return 0;
}
