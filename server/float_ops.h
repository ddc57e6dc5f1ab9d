// Plain loops over float arrays used on the server's hot path, kept apart so they stay simple
// enough for the -O3 vectorizer and can be tested on their own.
#ifndef PSTRAIN_SERVER_FLOAT_OPS_H_
#define PSTRAIN_SERVER_FLOAT_OPS_H_

#include <cstdint>
#include <string>

namespace pstrain::server {

// Index of the first NaN or +-Inf among `n` little-endian float32 values at `bytes` (any
// alignment), or -1 when all are finite.
int64_t FindNonFinite(const char* bytes, int64_t n);

// "nan", "inf" or "-inf" for a non-finite value, for error messages.
std::string NonFiniteName(const char* bytes, int64_t index);

// sum[i] += weight * x[i] for i in [0, n).
void AddScaled(float weight, const float* x, int64_t n, float* sum);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_FLOAT_OPS_H_
