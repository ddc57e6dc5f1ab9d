#include "server/float_ops.h"

#include <algorithm>
#include <vector>

#include "common/chunk_codec.h"

namespace pstrain::server {

void AddScaled(float weight, const float* __restrict x, int64_t n, float* __restrict sum) {
  for (int64_t i = 0; i < n; ++i) sum[i] += weight * x[i];
}

void Scale(float weight, const float* __restrict x, int64_t n, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = weight * x[i];
}

double SumOfSquares(const float* x, int64_t n) {
  // Eight partial sums, element i into sum i % 8: one running sum made each element wait for the
  // add before it (the gradient-norm guard cost a SYNC step of 1M floats 55% more, aggregation_bench
  // SyncStepAdamNormGuard); independent sums let the compiler vectorize the loop. The order is
  // fixed by the index, so the same values give the same sum on every server and every run.
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  for (; i < n; ++i) lane[i % kLanes] += static_cast<double>(x[i]) * x[i];
  double sum = 0;
  for (double v : lane) sum += v;
  return sum;
}

double ChunkSumOfSquares(ValueEncoding encoding, const PayloadView& data, int64_t length) {
  if (encoding == FLOAT32) {
    // The runs may split a float and need not be aligned: a piece at a time through this buffer.
    alignas(64) float piece[1024];
    PayloadReader reader(data);
    double sum = 0;
    while (reader.remaining() >= sizeof(float)) {
      const size_t n = std::min(reader.remaining() / sizeof(float), sizeof(piece) / sizeof(float));
      reader.Read(n * sizeof(float), piece);
      sum += SumOfSquares(piece, static_cast<int64_t>(n));
    }
    return sum;
  }
  std::vector<float> values(static_cast<size_t>(length));
  DecodeChunkValues(encoding, data, length, values.data());
  return SumOfSquares(values.data(), length);
}

}  // namespace pstrain::server
