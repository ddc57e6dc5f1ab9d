// Gradient compression on the worker's side of a push (JobSpec.compression, common/compression.h).
//
// ShardLayout fills a push whose values point at float32 chunks of the flat gradient; Encode turns
// them, in place, into the job's encoding: each chunk's values then point at encoded bytes this
// object keeps (until the next Encode of the same chunk), and the chunk's `encoding` says which
// (proto/ps.proto ValueEncoding). The servers decode into float32 before summing.
//
//   fp16, bf16  every value at 2 bytes. A chunk holding a finite value beyond fp16's range
//               (|g| >= 65520) goes as float32 for that step instead, rather than arriving as Inf.
//   topk:R      per chunk, the ceil(R x length) entries of largest magnitude of (gradient +
//               residual), as (index, value) pairs; the rest stays in the chunk's residual and is
//               added to the next step's gradient (error feedback), so nothing is dropped, only
//               delayed.
//
// A step sent again (a retry after a lost answer or a membership change: same step, data epoch and
// lease batch in the header) reuses its chunks' top-k encoding instead of compressing again, so a
// server that applied the first attempt and one that applies the second see the same values, and
// the residual counts the step's gradient once.
//
// Not thread-safe: one encoder per trainer, used from the trainer's thread.
#ifndef PSTRAIN_WORKER_PUSH_ENCODER_H_
#define PSTRAIN_WORKER_PUSH_ENCODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/compression.h"
#include "common/tensor_messages.h"
#include "worker/shard_layout.h"

namespace pstrain::worker {

class PushEncoder {
 public:
  // An encoder for pushes laid out by `layout` (borrowed; must outlive the encoder). With
  // Compression::kNone, Encode leaves pushes as they are. The tensors in `exact` (ids) always go
  // as float32: averaged tensors (TensorSpec.averaged), whose pushes are differences the servers
  // average, not gradients that tolerate rounding or a residual carried to later steps.
  // INVALID_ARGUMENT when a chunk is too large for top-k's uint32 indices.
  static absl::StatusOr<std::unique_ptr<PushEncoder>> Create(const Compression& compression, const ShardLayout* layout,
                                                             absl::flat_hash_set<int> exact = {});

  const Compression& compression() const { return compression_; }

  // Encodes `push`, whose values are `server`'s chunks [first, first + n) as float32
  // (ShardLayout::FillPush: first = 0; FillPartialPush: the run's first), n = push->values.size().
  // The values are read now and may change once Encode returns (unless the compression is none,
  // when they are left pointing at them). INVALID_ARGUMENT naming the tensor and element when
  // top-k meets a gradient that is not finite (that chunk's residual is dropped; the push must not
  // be sent).
  absl::Status Encode(int server, int first, OutgoingPush* push);

  // Forgets every chunk's residual and last encoding. For when the servers rolled back to a
  // checkpoint: the residual then holds gradient of steps that were undone, and the steps are sent
  // again with new gradients under the same step numbers.
  void Reset();

 private:
  // One chunk's encoded bytes, and its top-k state.
  struct ChunkState {
    std::vector<uint32_t> words;  // the encoded bytes, as 4-byte words so that they are aligned
    std::unique_ptr<TopKCompressor> topk;
    SparseGradient sparse;
    // The step the bytes encode (see EncodeTopK); valid once `encoded`.
    bool encoded = false;
    int64_t step = 0;
    int32_t data_epoch = 0;
    int64_t lease_id = 0;
    int64_t lease_batch = 0;
  };

  PushEncoder(const Compression& compression, const ShardLayout* layout, absl::flat_hash_set<int> exact);

  // Encodes chunk `state` from the `n` floats at `grad` into state.words; returns the encoding
  // used (FLOAT32 when a half-precision encoding would overflow).
  absl::StatusOr<ValueEncoding> EncodeHalf(const float* grad, int64_t n, ChunkState& state);
  absl::Status EncodeTopK(const PushRequest& header, const float* grad, int64_t n, ChunkState& state);

  const Compression compression_;
  const ShardLayout* layout_;
  const absl::flat_hash_set<int> exact_;         // tensor ids always sent as float32
  std::vector<std::vector<ChunkState>> chunks_;  // by server, then by the server's chunk index
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_PUSH_ENCODER_H_
