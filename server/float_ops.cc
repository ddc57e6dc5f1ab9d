#include "server/float_ops.h"

namespace pstrain::server {

void AddScaled(float weight, const float* __restrict x, int64_t n, float* __restrict sum) {
  for (int64_t i = 0; i < n; ++i) sum[i] += weight * x[i];
}

void Scale(float weight, const float* __restrict x, int64_t n, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = weight * x[i];
}

}  // namespace pstrain::server
