// Plain loops over float arrays used on the server's hot path (the NaN check is common/payload_view.h), kept apart so
// they stay simple enough for the -O3 vectorizer and can be tested on their own.
#ifndef PSTRAIN_SERVER_FLOAT_OPS_H_
#define PSTRAIN_SERVER_FLOAT_OPS_H_

#include <cstdint>

#include "common/payload_view.h"
#include "proto/ps.pb.h"

namespace pstrain::server {

// sum[i] += weight * x[i] for i in [0, n).
void AddScaled(float weight, const float* x, int64_t n, float* sum);

// out[i] = weight * x[i] for i in [0, n): the first term of a sum, without zeroing it first (the
// same values as AddScaled onto zeros, but for the sign of a zero).
void Scale(float weight, const float* x, int64_t n, float* out);

// The sum of x[i]^2 for i in [0, n), accumulated in double (a float32 square of 1e20 would
// overflow to inf), in eight partial sums (element i into sum i % 8) added at the end: a fixed
// order, so the result depends only on x.
double SumOfSquares(const float* x, int64_t n);

// The sum of the squares of a pushed chunk's `length` values as they arrived, in any encoding that
// passed CheckChunkShape (common/chunk_codec.h): the squared L2 norm of the chunk's gradient. For
// FLOAT32 it reads the received bytes through a small buffer on the stack and allocates nothing;
// a compressed chunk is decoded into a scratch vector first (only with the gradient-norm guard on).
double ChunkSumOfSquares(ValueEncoding encoding, const PayloadView& data, int64_t length);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_FLOAT_OPS_H_
