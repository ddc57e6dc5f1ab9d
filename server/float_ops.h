// Plain loops over float arrays used on the server's hot path (the NaN check is common/payload_view.h), kept apart so they stay simple
// enough for the -O3 vectorizer and can be tested on their own.
#ifndef PSTRAIN_SERVER_FLOAT_OPS_H_
#define PSTRAIN_SERVER_FLOAT_OPS_H_

#include <cstdint>

namespace pstrain::server {

// sum[i] += weight * x[i] for i in [0, n).
void AddScaled(float weight, const float* x, int64_t n, float* sum);

// out[i] = weight * x[i] for i in [0, n): the first term of a sum, without zeroing it first (the
// same values as AddScaled onto zeros, but for the sign of a zero).
void Scale(float weight, const float* x, int64_t n, float* out);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_FLOAT_OPS_H_
