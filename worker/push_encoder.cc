#include "worker/push_encoder.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chunk_codec.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain::worker {

absl::StatusOr<std::unique_ptr<PushEncoder>> PushEncoder::Create(const Compression& compression,
                                                                 const ShardLayout* layout,
                                                                 absl::flat_hash_set<int> exact) {
  auto encoder = std::unique_ptr<PushEncoder>(new PushEncoder(compression, layout, std::move(exact)));
  if (compression.kind == Compression::kTopK) {
    for (int s = 0; s < layout->num_servers(); ++s) {
      for (size_t i = 0; i < layout->chunks(s).size(); ++i) {
        const ChunkRef& ref = layout->chunks(s)[i];
        absl::StatusOr<std::unique_ptr<TopKCompressor>> topk = TopKCompressor::Create(ref.length);
        if (!topk.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("top-k compression of tensor '",
                                                         layout->tensor_name(ref.tensor_id), "' chunk at offset ",
                                                         ref.offset, ": ", topk.status().message()));
        }
        encoder->chunks_[s][i].topk = *std::move(topk);
      }
    }
  }
  return encoder;
}

PushEncoder::PushEncoder(const Compression& compression, const ShardLayout* layout, absl::flat_hash_set<int> exact)
    : compression_(compression), layout_(layout), exact_(std::move(exact)), chunks_(layout->num_servers()) {
  for (int s = 0; s < layout->num_servers(); ++s) chunks_[s] = std::vector<ChunkState>(layout->chunks(s).size());
}

absl::Status PushEncoder::Encode(int server, int first, OutgoingPush* push) {
  if (compression_.kind == Compression::kNone) return absl::OkStatus();
  const std::vector<ChunkRef>& refs = layout_->chunks(server);
  CHECK_LE(first + push->values.size(), refs.size()) << "server " << server << "'s chunks";
  for (size_t i = 0; i < push->values.size(); ++i) {
    const ChunkRef& ref = refs[first + i];
    if (exact_.contains(ref.tensor_id)) continue;  // float32, as it is
    ChunkState& state = chunks_[server][first + i];
    CHECK_EQ(push->values[i].size(), 4 * static_cast<size_t>(ref.length)) << "float32 values of chunk " << first + i;
    const float* grad = reinterpret_cast<const float*>(push->values[i].data());
    TensorChunk* chunk = push->header.mutable_chunks(static_cast<int>(i));
    size_t bytes = 0;
    if (compression_.kind == Compression::kTopK) {
      absl::Status status = EncodeTopK(push->header, grad, ref.length, state);
      if (!status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("push for tensor '", layout_->tensor_name(ref.tensor_id),
                                                       "' chunk at offset ", ref.offset, ": ", status.message()));
      }
      chunk->set_encoding(TOPK);
      bytes = 4 * state.words.size();
    } else {
      ASSIGN_OR_RETURN(ValueEncoding encoding, EncodeHalf(grad, ref.length, state));
      chunk->set_encoding(encoding);
      if (encoding == FLOAT32) continue;  // the values stay the float32 ones
      bytes = 2 * static_cast<size_t>(ref.length);
    }
    push->values[i] = absl::string_view(reinterpret_cast<const char*>(state.words.data()), bytes);
  }
  return absl::OkStatus();
}

void PushEncoder::Reset() {
  for (std::vector<ChunkState>& server : chunks_) {
    for (ChunkState& state : server) {
      if (state.topk != nullptr) state.topk->Reset();
      state.encoded = false;
    }
  }
}

absl::StatusOr<ValueEncoding> PushEncoder::EncodeHalf(const float* grad, int64_t n, ChunkState& state) {
  state.words.resize((n + 1) / 2);
  const absl::Span<uint16_t> codes(reinterpret_cast<uint16_t*>(state.words.data()), n);
  const bool fp16 = compression_.kind == Compression::kFp16;
  const absl::Status encoded =
      fp16 ? EncodeFp16(absl::MakeConstSpan(grad, n), codes) : EncodeBf16(absl::MakeConstSpan(grad, n), codes);
  if (encoded.ok()) return EncodingOf(compression_.kind);
  // Only a finite value beyond the format's range fails: send this chunk exactly instead.
  // Said once: a job whose gradients overflow fp16 ought to use bf16, and the user should know.
  LOG_FIRST_N(WARNING, 1) << "a chunk beyond " << CompressionName(compression_) << "'s range goes as float32 ("
                          << encoded.message() << "); later ones are logged at -v=1";
  VLOG(1) << "chunk sent as float32: " << encoded.message();
  return FLOAT32;
}

absl::Status PushEncoder::EncodeTopK(const PushRequest& header, const float* grad, int64_t n, ChunkState& state) {
  const bool same_step = state.encoded && state.step == header.step() && state.data_epoch == header.data_epoch() &&
                         state.lease_id == header.lease_id() && state.lease_batch == header.lease_batch();
  if (same_step) return absl::OkStatus();
  state.encoded = false;
  if (n == 0) {
    state.words.clear();
  } else {
    RETURN_IF_ERROR(
        state.topk->Compress(absl::MakeConstSpan(grad, n), TopKCount(compression_.topk_ratio, n), &state.sparse));
    const size_t k = state.sparse.indices.size();
    state.words.resize(2 * k);
    std::memcpy(state.words.data(), state.sparse.indices.data(), 4 * k);
    std::memcpy(state.words.data() + k, state.sparse.values.data(), 4 * k);
  }
  state.encoded = true;
  state.step = header.step();
  state.data_epoch = header.data_epoch();
  state.lease_id = header.lease_id();
  state.lease_batch = header.lease_batch();
  return absl::OkStatus();
}

}  // namespace pstrain::worker
