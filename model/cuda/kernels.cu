// The CUDA backend's kernels (see kernels.h). Elementwise kernels use grid-stride loops with
// 64-bit indices; the grid is capped, so any n launches.
#include "model/cuda/kernels.h"

#include <algorithm>
#include <cmath>

namespace pstrain {
namespace model {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest

int Blocks(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min((n + kThreads - 1) / kThreads, kMaxBlocks)));
}

// Window2d's sizes, with the output size computed on the host (Window2d's methods are host code).
struct Geometry {
  int channels, height, width, kernel, stride, padding, out_h, out_w;
};

Geometry GeometryOf(const Window2d& w) {
  return Geometry{w.channels, w.height, w.width, w.kernel, w.stride, w.padding, w.out_height(), w.out_width()};
}

__device__ int64_t FirstIndex() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void FillKernel(int64_t n, float value, float* x) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) x[i] = value;
}

__global__ void ScaleKernel(int64_t n, float beta, float* x) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) x[i] = beta == 0 ? 0.0f : beta * x[i];
}

__global__ void AddBiasKernel(int64_t total, int cols, const float* bias, float* x) {
  for (int64_t i = FirstIndex(); i < total; i += GridStride()) x[i] += bias[i % cols];
}

// One thread per column, summing down the rows in order as the CPU does; the explicit roundings
// keep nvcc from fusing the final line into an FMA the CPU does not use.
__global__ void ColumnSumsKernel(int rows, int cols, const float* x, float alpha, float beta, float* out) {
  for (int64_t c = FirstIndex(); c < cols; c += GridStride()) {
    float sum = 0.0f;
    for (int r = 0; r < rows; ++r) sum += x[static_cast<int64_t>(r) * cols + c];
    const float old = beta == 0 ? 0.0f : __fmul_rn(beta, out[c]);
    out[c] = __fadd_rn(__fmul_rn(alpha, sum), old);
  }
}

__global__ void ReluForwardKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void ReluBackwardKernel(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// ---- Softmax cross-entropy ----------------------------------------------------------------------
//
// One block of kXentWarps warps; warp w takes rows w, w + kXentWarps, ... and its lanes stride over
// the columns. Lane 0 of each warp keeps the warp's sums, and thread 0 adds the warps' sums in a
// fixed order: the result does not depend on scheduling. A single block is plenty for a
// classifier's logits (rows = a batch, cols = classes).

constexpr int kXentWarps = 16;
constexpr unsigned kFullMask = 0xffffffffu;

// Whether (v, c) beats (best_v, best_c): a larger value, or the same value at an earlier column
// (the CPU's first arg-max). c == cols marks "no column".
__device__ bool Beats(float v, int c, float best_v, int best_c, int cols) {
  if (c >= cols) return false;
  if (best_c >= cols) return true;
  return v > best_v || (v == best_v && c < best_c);
}

__global__ void SoftmaxXentKernel(int rows, int cols, const float* logits, const int32_t* labels, float grad_scale,
                                  float* dlogits, XentSums* sums) {
  __shared__ double warp_loss[kXentWarps];
  __shared__ long long warp_correct[kXentWarps];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  double loss_sum = 0;
  long long correct = 0;
  for (int r = warp; r < rows; r += kXentWarps) {
    const float* z = logits + static_cast<int64_t>(r) * cols;
    // Arg-max, first on ties.
    float best = 0.0f;
    int best_c = cols;
    for (int c = lane; c < cols; c += 32) {
      if (Beats(z[c], c, best, best_c, cols)) {
        best = z[c];
        best_c = c;
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(kFullMask, best, offset);
      const int other_c = __shfl_xor_sync(kFullMask, best_c, offset);
      if (Beats(other, other_c, best, best_c, cols)) {
        best = other;
        best_c = other_c;
      }
    }
    const float max = best;
    const int label = labels[r];
    const float z_label = z[label];  // read before any lane may overwrite it (dlogits == logits)
    double sum = 0;
    for (int c = lane; c < cols; c += 32) sum += exp(static_cast<double>(z[c] - max));
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
    __syncwarp();  // every lane has read this row's logits
    if (lane == 0) {
      // -log softmax[label] = log(sum exp(z - max)) - (z[label] - max), as on the CPU.
      loss_sum += log(sum) - static_cast<double>(z_label - max);
      if (best_c == label) ++correct;
    }
    if (dlogits != nullptr) {
      float* d = dlogits + static_cast<int64_t>(r) * cols;
      const double inv_sum = 1.0 / sum;
      for (int c = lane; c < cols; c += 32) {
        const double p = exp(static_cast<double>(z[c] - max)) * inv_sum;
        d[c] = static_cast<float>(grad_scale * (p - (c == label ? 1.0 : 0.0)));
      }
    }
  }
  if (lane == 0) {
    warp_loss[warp] = loss_sum;
    warp_correct[warp] = correct;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total_loss = 0;
    long long total_correct = 0;
    for (int w = 0; w < kXentWarps; ++w) {
      total_loss += warp_loss[w];
      total_correct += warp_correct[w];
    }
    sums->loss_sum = total_loss;
    sums->correct = total_correct;
  }
}

// ---- Binary cross-entropy and sigmoid -----------------------------------------------------------
//
// One block; thread t takes rows t, t + kBceThreads, ... in double, then a tree reduction in shared
// memory with a fixed shape: the result does not depend on scheduling. A batch of logits is a few
// thousand rows at most, so one block is plenty.

constexpr int kBceThreads = 512;

// 1 / (1 + exp(-z)) with exp(-|z|) <= 1, as on the CPU.
__device__ double StableSigmoid(double z) {
  const double e = exp(-fabs(z));
  return z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

__global__ void SigmoidXentKernel(int n, const float* logits, const float* labels, float grad_scale, float* dlogits,
                                  XentSums* sums) {
  __shared__ double loss[kBceThreads];
  __shared__ long long correct[kBceThreads];
  double my_loss = 0;
  long long my_correct = 0;
  for (int i = threadIdx.x; i < n; i += kBceThreads) {
    const double z = logits[i];
    const double y = labels[i];
    my_loss += fmax(z, 0.0) - z * y + log1p(exp(-fabs(z)));
    if ((z > 0) == (y > 0.5)) ++my_correct;
    if (dlogits != nullptr) dlogits[i] = static_cast<float>(grad_scale * (StableSigmoid(z) - y));
  }
  loss[threadIdx.x] = my_loss;
  correct[threadIdx.x] = my_correct;
  __syncthreads();
  for (int half = kBceThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss[threadIdx.x] += loss[threadIdx.x + half];
      correct[threadIdx.x] += correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums->loss_sum = loss[0];
    sums->correct = correct[0];
  }
}

__global__ void SigmoidKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    y[i] = static_cast<float>(StableSigmoid(x[i]));
  }
}

// ---- Sparse rows and strided copies ---------------------------------------------------------------

// One thread per output element, summing its row's entries in order from 0 with explicit
// roundings (no FMA), then storing or adding: the CPU's arithmetic, bit for bit. Threads of a warp
// share a row for cols >= 32, so the entry reads are broadcasts and the b reads coalesce.
__global__ void CsrMatMulKernel(int64_t total, int cols, const int32_t* offsets, const int32_t* indices,
                                const float* values, const float* b, int b_stride, bool accumulate, float* c,
                                int c_stride) {
  for (int64_t index = FirstIndex(); index < total; index += GridStride()) {
    const int64_t r = index / cols;
    const int col = static_cast<int>(index % cols);
    float acc = 0.0f;
    for (int32_t j = offsets[r]; j < offsets[r + 1]; ++j) {
      acc = __fadd_rn(acc, __fmul_rn(values[j], b[static_cast<int64_t>(indices[j]) * b_stride + col]));
    }
    float* out = c + r * c_stride + col;
    *out = accumulate ? __fadd_rn(*out, acc) : acc;
  }
}

__global__ void CopyMatrixKernel(int64_t total, int cols, const float* src, int src_stride, float* dst,
                                 int dst_stride) {
  for (int64_t index = FirstIndex(); index < total; index += GridStride()) {
    const int64_t r = index / cols;
    const int col = static_cast<int>(index % cols);
    dst[r * dst_stride + col] = src[r * src_stride + col];
  }
}

// One thread per row, in the CPU backend's order, each operation rounded on its own (__fadd_rn,
// __fmul_rn: no contraction into a fused multiply-add), so both give the same bits.
__global__ void PairwiseDotsForwardKernel(int rows, int fields, int dim, const float* x, int stride, float* y) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const float* row = x + r * stride;
    float term = 0.0f;
    for (int d = 0; d < dim; ++d) {
      float s = 0.0f;
      float q = 0.0f;
      for (int f = 0; f < fields; ++f) {
        const float v = row[f * dim + d];
        s = __fadd_rn(s, v);
        q = __fadd_rn(q, __fmul_rn(v, v));
      }
      term = __fadd_rn(term, __fsub_rn(__fmul_rn(s, s), q));
    }
    y[r] = __fadd_rn(y[r], __fmul_rn(0.5f, term));
  }
}

// One thread per (row, column d).
__global__ void PairwiseDotsBackwardKernel(int64_t total, int fields, int dim, const float* x, int stride,
                                           const float* dy, float* dx, int dx_stride) {
  for (int64_t index = FirstIndex(); index < total; index += GridStride()) {
    const int64_t r = index / dim;
    const int d = static_cast<int>(index % dim);
    const float* row = x + r * stride;
    float* grad = dx + r * dx_stride;
    float s = 0.0f;
    for (int f = 0; f < fields; ++f) s = __fadd_rn(s, row[f * dim + d]);
    for (int f = 0; f < fields; ++f) {
      grad[f * dim + d] = __fadd_rn(grad[f * dim + d], __fmul_rn(dy[r], __fsub_rn(s, row[f * dim + d])));
    }
  }
}

// ---- Convolution and pooling ----------------------------------------------------------------

// One thread per col entry, in the order of the CPU's walk (image, c, kh, kw, oh, ow).
__global__ void Im2ColKernel(int64_t total, Geometry g, const float* x, float* col) {
  const int out_h = g.out_h, out_w = g.out_w;
  for (int64_t index = FirstIndex(); index < total; index += GridStride()) {
    int64_t t = index;
    const int ow = static_cast<int>(t % out_w);
    t /= out_w;
    const int oh = static_cast<int>(t % out_h);
    t /= out_h;
    const int kw = static_cast<int>(t % g.kernel);
    t /= g.kernel;
    const int kh = static_cast<int>(t % g.kernel);
    const int64_t plane = t / g.kernel;  // image * channels + channel
    const int h = oh * g.stride - g.padding + kh;
    const int w = ow * g.stride - g.padding + kw;
    const bool inside = h >= 0 && h < g.height && w >= 0 && w < g.width;
    col[index] = inside ? x[(plane * g.height + h) * g.width + w] : 0.0f;
  }
}

// One thread per input pixel, gathering the col entries Im2Col copied from it. They are added in
// (kh, kw) order, the order in which the CPU's scatter reaches this pixel, so no atomics and the
// same result bit for bit.
__global__ void Col2ImKernel(int64_t total, Geometry g, const float* col, float* x) {
  const int out_h = g.out_h, out_w = g.out_w;
  const int64_t col_cols = static_cast<int64_t>(out_h) * out_w;
  for (int64_t index = FirstIndex(); index < total; index += GridStride()) {
    const int w = static_cast<int>(index % g.width);
    const int h = static_cast<int>((index / g.width) % g.height);
    const int64_t plane = index / (static_cast<int64_t>(g.width) * g.height);
    float acc = x[index];
    for (int kh = 0; kh < g.kernel; ++kh) {
      const int hp = h + g.padding - kh;  // = oh * stride for the window row that reads (h, w)
      if (hp < 0) break;                  // and it only shrinks as kh grows
      if (hp % g.stride != 0 || hp / g.stride >= out_h) continue;
      const int oh = hp / g.stride;
      for (int kw = 0; kw < g.kernel; ++kw) {
        const int wp = w + g.padding - kw;
        if (wp < 0) break;
        if (wp % g.stride != 0 || wp / g.stride >= out_w) continue;
        const int ow = wp / g.stride;
        const int64_t row = (plane * g.kernel + kh) * g.kernel + kw;
        acc += col[row * col_cols + static_cast<int64_t>(oh) * out_w + ow];
      }
    }
    x[index] = acc;
  }
}

// One thread per output, the CPU's loop: first maximum in row-major window order.
__global__ void MaxPoolForwardKernel(int64_t total, Geometry g, const float* x, float* y, int32_t* argmax) {
  const int out_h = g.out_h, out_w = g.out_w;
  for (int64_t index = FirstIndex(); index < total; index += GridStride()) {
    const int ow = static_cast<int>(index % out_w);
    const int oh = static_cast<int>((index / out_w) % out_h);
    const int64_t plane = index / (static_cast<int64_t>(out_w) * out_h);
    const float* p = x + plane * g.height * g.width;
    int best = (oh * g.stride) * g.width + ow * g.stride;
    for (int kh = 0; kh < g.kernel; ++kh) {
      const int row = (oh * g.stride + kh) * g.width + ow * g.stride;
      for (int kw = 0; kw < g.kernel; ++kw) {
        if (p[row + kw] > p[best]) best = row + kw;
      }
    }
    y[index] = p[best];
    argmax[index] = best;
  }
}

// One thread per input pixel, gathering dy from the windows that cover it and chose it, in
// ascending output order (the CPU's scatter order): deterministic, and every dx is written, so no
// separate clearing pass.
__global__ void MaxPoolBackwardKernel(int64_t total, Geometry g, const int32_t* argmax, const float* dy, float* dx) {
  const int out_h = g.out_h, out_w = g.out_w;
  const int64_t plane_out = static_cast<int64_t>(out_h) * out_w;
  for (int64_t index = FirstIndex(); index < total; index += GridStride()) {
    const int w = static_cast<int>(index % g.width);
    const int h = static_cast<int>((index / g.width) % g.height);
    const int64_t plane = index / (static_cast<int64_t>(g.width) * g.height);
    const int pixel = h * g.width + w;
    // Windows oh with oh * stride <= h < oh * stride + kernel, inside the output.
    const int oh_first = h < g.kernel ? 0 : (h - g.kernel) / g.stride + 1;
    const int oh_last = min(h / g.stride, out_h - 1);
    const int ow_first = w < g.kernel ? 0 : (w - g.kernel) / g.stride + 1;
    const int ow_last = min(w / g.stride, out_w - 1);
    float acc = 0.0f;
    for (int oh = oh_first; oh <= oh_last; ++oh) {
      for (int ow = ow_first; ow <= ow_last; ++ow) {
        const int64_t o = plane * plane_out + static_cast<int64_t>(oh) * out_w + ow;
        if (argmax[o] == pixel) acc += dy[o];
      }
    }
    dx[index] = acc;
  }
}

}  // namespace

void LaunchFill(cudaStream_t stream, int64_t n, float value, float* x) {
  if (n > 0) FillKernel<<<Blocks(n), kThreads, 0, stream>>>(n, value, x);
}

void LaunchScale(cudaStream_t stream, int64_t n, float beta, float* x) {
  if (n > 0) ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(n, beta, x);
}

void LaunchAddBias(cudaStream_t stream, int rows, int cols, const float* bias, float* x) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  if (total > 0) AddBiasKernel<<<Blocks(total), kThreads, 0, stream>>>(total, cols, bias, x);
}

void LaunchColumnSums(cudaStream_t stream, int rows, int cols, const float* x, float alpha, float beta, float* out) {
  if (cols > 0) {
    ColumnSumsKernel<<<Blocks(cols), kThreads, 0, stream>>>(rows, cols, x, alpha, beta, out);
  }
}

void LaunchReluForward(cudaStream_t stream, int64_t n, const float* x, float* y) {
  if (n > 0) ReluForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
}

void LaunchReluBackward(cudaStream_t stream, int64_t n, const float* y, const float* dy, float* dx) {
  if (n > 0) ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(n, y, dy, dx);
}

void LaunchSoftmaxCrossEntropy(cudaStream_t stream, int rows, int cols, const float* logits, const int32_t* labels,
                               float grad_scale, float* dlogits, XentSums* sums) {
  SoftmaxXentKernel<<<1, kXentWarps * 32, 0, stream>>>(rows, cols, logits, labels, grad_scale, dlogits, sums);
}

void LaunchSigmoidCrossEntropy(cudaStream_t stream, int n, const float* logits, const float* labels, float grad_scale,
                               float* dlogits, XentSums* sums) {
  SigmoidXentKernel<<<1, kBceThreads, 0, stream>>>(n, logits, labels, grad_scale, dlogits, sums);
}

void LaunchSigmoid(cudaStream_t stream, int64_t n, const float* x, float* y) {
  if (n > 0) SigmoidKernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
}

void LaunchCsrMatMul(cudaStream_t stream, const CsrMatrix& a, int cols, const float* b, int b_stride, bool accumulate,
                     float* c, int c_stride) {
  const int64_t total = static_cast<int64_t>(a.rows) * cols;
  if (total > 0) {
    CsrMatMulKernel<<<Blocks(total), kThreads, 0, stream>>>(total, cols, a.offsets, a.indices, a.values, b, b_stride,
                                                            accumulate, c, c_stride);
  }
}

void LaunchCopyMatrix(cudaStream_t stream, int rows, int cols, const float* src, int src_stride, float* dst,
                      int dst_stride) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  if (total > 0) {
    CopyMatrixKernel<<<Blocks(total), kThreads, 0, stream>>>(total, cols, src, src_stride, dst, dst_stride);
  }
}

void LaunchPairwiseDotsForward(cudaStream_t stream, int rows, int fields, int dim, const float* x, int stride,
                               float* y) {
  if (rows > 0) {
    PairwiseDotsForwardKernel<<<Blocks(rows), kThreads, 0, stream>>>(rows, fields, dim, x, stride, y);
  }
}

void LaunchPairwiseDotsBackward(cudaStream_t stream, int rows, int fields, int dim, const float* x, int stride,
                                const float* dy, float* dx, int dx_stride) {
  const int64_t total = static_cast<int64_t>(rows) * dim;
  if (total > 0) {
    PairwiseDotsBackwardKernel<<<Blocks(total), kThreads, 0, stream>>>(total, fields, dim, x, stride, dy, dx,
                                                                       dx_stride);
  }
}

void LaunchIm2Col(cudaStream_t stream, int n, const Window2d& window, const float* x, float* col) {
  const int64_t total = n * window.col_rows() * window.col_cols();
  if (total > 0) {
    Im2ColKernel<<<Blocks(total), kThreads, 0, stream>>>(total, GeometryOf(window), x, col);
  }
}

void LaunchCol2Im(cudaStream_t stream, int n, const Window2d& window, const float* col, float* x) {
  const int64_t total = n * window.image_elements();
  if (total > 0) {
    Col2ImKernel<<<Blocks(total), kThreads, 0, stream>>>(total, GeometryOf(window), col, x);
  }
}

void LaunchMaxPoolForward(cudaStream_t stream, int n, const Window2d& window, const float* x, float* y,
                          int32_t* argmax) {
  const int64_t total = static_cast<int64_t>(n) * window.channels * window.col_cols();
  if (total > 0) {
    MaxPoolForwardKernel<<<Blocks(total), kThreads, 0, stream>>>(total, GeometryOf(window), x, y, argmax);
  }
}

void LaunchMaxPoolBackward(cudaStream_t stream, int n, const Window2d& window, const int32_t* argmax, const float* dy,
                           float* dx) {
  const int64_t total = n * window.image_elements();
  if (total > 0) {
    MaxPoolBackwardKernel<<<Blocks(total), kThreads, 0, stream>>>(total, GeometryOf(window), argmax, dy, dx);
  }
}

}  // namespace cuda
}  // namespace model
}  // namespace pstrain
