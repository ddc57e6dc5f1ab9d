// Gradient compression codecs: what a worker may do to a gradient before pushing it, and what a
// server does to take it back in fp32. Plain C++ over spans (no gRPC, no protobuf), so the
// transport decides how the encoded arrays travel.
//
//   kind   on the wire (n floats)            worker                       server
//   none   4n bytes: fp32                    -                            AddScaled
//   fp16   2n bytes: IEEE binary16           EncodeFp16                   AccumulateFp16
//   bf16   2n bytes: bfloat16                EncodeBf16                   AccumulateBf16
//   topk   8k bytes: k uint32 indices, then  TopKCompressor::Compress     AccumulateTopK
//          k fp32 values (k = TopKCount)     (keeps a residual per tensor)
//
// All encodings round to nearest, ties to even. Multi-byte values are in host byte order, which is
// the wire's little-endian on every machine we run on.
#ifndef PSTRAIN_COMMON_COMPRESSION_H_
#define PSTRAIN_COMMON_COMPRESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pstrain {

// ---------------------------------------------------------------------------------------------
// Which compression a job uses.

struct Compression {
  enum Kind { kNone, kFp16, kBf16, kTopK };
  Kind kind = kNone;
  // For kTopK only: the fraction of each tensor's entries sent per step, in (0, 1].
  double topk_ratio = 0.0;
};

// Parses the --compression flag: "none", "fp16", "bf16" or "topk:RATIO" with RATIO in (0, 1]
// ("topk:0.01" sends 1% of each tensor). INVALID_ARGUMENT with what was wrong otherwise, e.g.
// "--compression: got 'topk:2', expected a ratio in (0, 1]".
absl::StatusOr<Compression> ParseCompression(absl::string_view text);

// The inverse of ParseCompression: "none", "fp16", "bf16", "topk:0.01". The ratio is printed with
// as few digits as parse back to the same double.
std::string CompressionName(const Compression& compression);

// Entries a top-k push of a tensor of n floats carries: max(1, ceil(ratio * n)), capped at n
// (0 when n == 0). The product is rounded up only past a relative 1e-9, so that the decimal
// ratios people write give the count they expect (0.07 of 100 is 7, not 8).
// REQUIRES: ratio in (0, 1], n >= 0.
int64_t TopKCount(double ratio, int64_t n);

// Bytes a tensor of n floats takes on the wire under `compression` (payload only, no framing):
// 4n for none, 2n for fp16 and bf16, 8 * TopKCount(ratio, n) for top-k.
int64_t WireBytes(const Compression& compression, int64_t n);

// ---------------------------------------------------------------------------------------------
// fp16 and bf16: every element, at half the bytes.
//
// fp16 (IEEE 754 binary16) keeps 11 significant bits over [6.0e-8, 65504] (subnormal below
// 6.1e-5); bf16 keeps 8 significant bits over fp32's whole range. Signed zeros are kept, fp32
// subnormals are rounded like any other value, Inf stays Inf and NaN becomes a quiet NaN of the
// same sign with the top of its payload.
//
// A server rejects a push with a non-finite value (FindNonFiniteFp16/Bf16 check the codes without
// decoding), so an encoder must not turn a finite gradient into Inf: a finite value that rounds
// beyond the largest finite value (|x| >= 65520 for fp16, |x| >= 3.3962e38 for bf16) is an error.
//
// The loops are branch-free so that -O3 vectorizes them, and fp16 uses x86's F16C instructions
// where the CPU has them (same results); see bench/compression_bench.cc.

// dst[i] = fp16(src[i]). INVALID_ARGUMENT when the sizes differ, or naming the first finite
// element that overflows: "element 17 is 1e+06, beyond fp16's largest finite 65504". On error
// the contents of dst are unspecified.
absl::Status EncodeFp16(absl::Span<const float> src, absl::Span<uint16_t> dst);

// The same for bf16: "element 3 is 3.40282e+38, beyond bf16's largest finite 3.38953e+38".
absl::Status EncodeBf16(absl::Span<const float> src, absl::Span<uint16_t> dst);

// dst[i] = float(src[i]), exact. INVALID_ARGUMENT (dst untouched) when the sizes differ.
absl::Status DecodeFp16(absl::Span<const uint16_t> src, absl::Span<float> dst);
absl::Status DecodeBf16(absl::Span<const uint16_t> src, absl::Span<float> dst);

// dst[i] += weight * float(src[i]): a server's weighted sum, in fp32, without a decoded copy.
// INVALID_ARGUMENT (dst untouched) when the sizes differ.
absl::Status AccumulateFp16(absl::Span<const uint16_t> src, float weight, absl::Span<float> dst);
absl::Status AccumulateBf16(absl::Span<const uint16_t> src, float weight, absl::Span<float> dst);

// Index of the first Inf or NaN code in src, or -1 when every value is finite.
int64_t FindNonFiniteFp16(absl::Span<const uint16_t> src);
int64_t FindNonFiniteBf16(absl::Span<const uint16_t> src);

// One value at a time, for tests and diagnostics. FloatToFp16 and FloatToBf16 return Inf for a
// finite value that overflows (the span encoders report it instead).
uint16_t FloatToFp16(float value);
float Fp16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t bits);

// ---------------------------------------------------------------------------------------------
// Top-k sparsification with error feedback.
//
// Each step sends only the k entries of largest magnitude of (gradient + residual) and keeps the
// rest as the residual for the next step, so nothing is dropped, only delayed: over any number of
// steps, the sum of what was sent plus the residual equals the sum of the gradients (up to fp32
// rounding of the running sums).

// A top-k push: (index, value) pairs sorted by index, as two parallel arrays; indices are
// strictly ascending.
struct SparseGradient {
  std::vector<uint32_t> indices;
  std::vector<float> values;
};

// Holds the residual (error-feedback memory) of one tensor of n floats, and the scratch buffers
// of its selection so that steady-state Compress calls do not allocate.
//
// Not thread-safe: one compressor per tensor, used by one thread at a time.
class TopKCompressor {
 public:
  // A compressor for a tensor of n floats with a zero residual. INVALID_ARGUMENT unless
  // 0 <= n <= 2^32 (indices are uint32).
  static absl::StatusOr<std::unique_ptr<TopKCompressor>> Create(int64_t n);

  TopKCompressor(const TopKCompressor&) = delete;
  TopKCompressor& operator=(const TopKCompressor&) = delete;

  int64_t size() const { return static_cast<int64_t>(residual_.size()); }

  // Adds `grad` to the residual, moves the min(k, n) entries of largest magnitude into `out`
  // (sorted by index; out's previous contents are replaced, its capacity reused) and keeps the
  // rest as the residual; the selected entries' residual becomes 0. Equal magnitudes are taken in
  // index order, so the result is a function of the inputs alone (the sampling inside affects
  // only the speed). Does not block; O(n), about 4x a memcpy of the tensor at k = 1% of 16M.
  //
  // INVALID_ARGUMENT, with nothing changed, when grad.size() != size() or k < 1. INVALID_ARGUMENT
  // naming the element when gradient + residual is not finite (a non-finite gradient, or a sum
  // that overflows); the residual is then dropped as by Reset(), since it holds that value.
  absl::Status Compress(absl::Span<const float> grad, int64_t k, SparseGradient* out);

  // Drops the residual. Call it when what it holds no longer applies: after a membership change
  // re-shards the tensor, or after the parameters were restored from a checkpoint.
  void Reset();

  // The current residual, for tests and metrics. Valid until the next Compress or Reset.
  absl::Span<const float> residual() const { return residual_; }

 private:
  explicit TopKCompressor(int64_t n);

  // The magnitude bits from which an entry of residual_ is a candidate for the top k: estimated
  // from a random sample so that k or more pass with high probability, and not many more. 0 (every
  // entry) for small tensors.
  uint32_t SampleThreshold(int64_t k);
  // Fills candidates_ with the keys (see compression.cc) of the entries of residual_ whose
  // magnitude bits are >= threshold_bits, in index order.
  void CollectCandidates(uint32_t threshold_bits);

  std::vector<float> residual_;
  // Scratch, kept between calls for its capacity only.
  std::vector<uint64_t> candidates_;
  std::vector<uint64_t> selection_;
  std::vector<uint32_t> sample_;
  uint64_t rng_state_;  // picks the sample positions; advances every call
};

// OK when `indices` can be scattered into a tensor of n floats: strictly ascending and < n.
// INVALID_ARGUMENT naming the first bad position otherwise, e.g. "top-k index 5 is 17, not above
// the previous index 17" or "top-k index 9 is 4096, beyond the tensor's 4096 floats".
absl::Status CheckTopKIndices(absl::Span<const uint32_t> indices, int64_t n);

// dst[indices[j]] += weight * values[j] for every j: a server's weighted sum of a top-k push.
// Validates first (CheckTopKIndices, and indices.size() == values.size()), so that on
// INVALID_ARGUMENT dst is untouched. Does not check that the values are finite.
absl::Status AccumulateTopK(absl::Span<const uint32_t> indices, absl::Span<const float> values, float weight,
                            absl::Span<float> dst);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_COMPRESSION_H_
