// The CUDA kernels of the CUDA backend (private to model/cuda/). Each Launch* queues its kernel
// on `stream` and returns at once; it neither synchronizes nor checks for errors (the backend
// calls cudaGetLastError after launching). Arguments and semantics are those of the Backend
// method of the same name (model/backend.h); all pointers are device memory.
//
// Every kernel mirrors the CPU backend's arithmetic order where that is cheap, so results match
// the CPU bit for bit except in GEMMs, the loss sums and the sigmoid (CUDA's exp and log1p may
// differ from the C library's in the last bit): Col2Im, MaxPoolBackward and CsrMatMul gather per
// output element, adding contributions in the CPU's order, instead of scattering with atomics.
#ifndef PSTRAIN_MODEL_CUDA_KERNELS_H_
#define PSTRAIN_MODEL_CUDA_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "model/backend.h"

namespace pstrain {
namespace model {
namespace cuda {

// What the softmax cross-entropy kernel leaves in device memory, copied to the host in one go.
struct XentSums {
  double loss_sum;
  long long correct;
};

void LaunchFill(cudaStream_t stream, int64_t n, float value, float* x);
// x = beta * x, or 0 when beta == 0 (old contents may be garbage): a GEMM with k == 0.
void LaunchScale(cudaStream_t stream, int64_t n, float beta, float* x);
void LaunchAddBias(cudaStream_t stream, int rows, int cols, const float* bias, float* x);
void LaunchColumnSums(cudaStream_t stream, int rows, int cols, const float* x, float alpha, float beta, float* out);
void LaunchReluForward(cudaStream_t stream, int64_t n, const float* x, float* y);
void LaunchReluBackward(cudaStream_t stream, int64_t n, const float* y, const float* dy, float* dx);
// Writes the sums over all rows into *sums (device memory); dlogits may be null or equal logits.
void LaunchSoftmaxCrossEntropy(cudaStream_t stream, int rows, int cols, const float* logits, const int32_t* labels,
                               float grad_scale, float* dlogits, XentSums* sums);
// Writes the loss sum and correct count over all n rows into *sums (device memory); dlogits may
// be null or equal logits.
void LaunchSigmoidCrossEntropy(cudaStream_t stream, int n, const float* logits, const float* labels, float grad_scale,
                               float* dlogits, XentSums* sums);
void LaunchSigmoid(cudaStream_t stream, int64_t n, const float* x, float* y);
void LaunchCsrMatMul(cudaStream_t stream, const CsrMatrix& a, int cols, const float* b, int b_stride, bool accumulate,
                     float* c, int c_stride);
void LaunchCopyMatrix(cudaStream_t stream, int rows, int cols, const float* src, int src_stride, float* dst,
                      int dst_stride);
void LaunchPairwiseDotsForward(cudaStream_t stream, int rows, int fields, int dim, const float* x, int stride,
                               float* y);
void LaunchPairwiseDotsBackward(cudaStream_t stream, int rows, int fields, int dim, const float* x, int stride,
                                const float* dy, float* dx, int dx_stride);
void LaunchIm2Col(cudaStream_t stream, int n, const Window2d& window, const float* x, float* col);
void LaunchCol2Im(cudaStream_t stream, int n, const Window2d& window, const float* col, float* x);
void LaunchMaxPoolForward(cudaStream_t stream, int n, const Window2d& window, const float* x, float* y,
                          int32_t* argmax);
void LaunchMaxPoolBackward(cudaStream_t stream, int n, const Window2d& window, const int32_t* argmax, const float* dy,
                           float* dx);

}  // namespace cuda
}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CUDA_KERNELS_H_
