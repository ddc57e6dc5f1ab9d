#include "model/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace model {
namespace {

// Cache-line alignment keeps vector loads aligned and rows of different threads apart.
constexpr size_t kAlignment = 64;

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu backend: cannot allocate ", bytes, " bytes"));
    }
    return ptr;
  }

  void Free(void* ptr) override { std::free(ptr); }

  absl::Status Upload(const void* host_src, size_t bytes, void* dst) override {
    if (bytes > 0) std::memcpy(dst, host_src, bytes);
    return absl::OkStatus();
  }

  absl::Status Download(const void* src, size_t bytes, void* host_dst) override {
    if (bytes > 0) std::memcpy(host_dst, src, bytes);
    return absl::OkStatus();
  }

  absl::Status Synchronize() override { return absl::OkStatus(); }

  void Fill(int64_t n, float value, float* x) override { std::fill(x, x + n, value); }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
            float* c) override {
    if (m == 0 || n == 0) return;
    if (k == 0) {
      // BLAS leaves C * beta here; spell it out so beta == 0 clears garbage.
      for (int64_t i = 0; i < static_cast<int64_t>(m) * n; ++i) c[i] = beta == 0 ? 0 : beta * c[i];
      return;
    }
    const int lda = trans_a ? m : k;
    const int ldb = trans_b ? k : n;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                a, lda, b, ldb, beta, c, n);
  }

  void AddBias(int rows, int cols, const float* bias, float* x) override {
    for (int r = 0; r < rows; ++r) {
      float* row = x + static_cast<int64_t>(r) * cols;
      for (int c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }

  void ColumnSums(int rows, int cols, const float* x, float alpha, float beta, float* out) override {
    // Accumulate row by row so the inner loop runs over contiguous memory and vectorizes.
    sums_.assign(cols, 0.0f);
    float* sums = sums_.data();
    for (int r = 0; r < rows; ++r) {
      const float* row = x + static_cast<int64_t>(r) * cols;
      for (int c = 0; c < cols; ++c) sums[c] += row[c];
    }
    for (int c = 0; c < cols; ++c) out[c] = alpha * sums[c] + (beta == 0 ? 0.0f : beta * out[c]);
  }

  void ReluForward(int64_t n, const float* x, float* y) override {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }

  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }

  XentResult SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels, float grad_scale,
                                 float* dlogits) override {
    XentResult result;
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<int64_t>(r) * cols;
      int arg_max = 0;
      for (int c = 1; c < cols; ++c) {
        if (z[c] > z[arg_max]) arg_max = c;
      }
      const float max = z[arg_max];
      double sum = 0;
      for (int c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(z[c] - max));
      const int label = labels[r];
      // -log softmax[label] = log(sum exp(z - max)) - (z[label] - max), stable for large logits.
      result.loss_sum += std::log(sum) - static_cast<double>(z[label] - max);
      if (arg_max == label) ++result.correct;
      if (dlogits != nullptr) {
        float* d = dlogits + static_cast<int64_t>(r) * cols;
        const double inv_sum = 1.0 / sum;
        for (int c = 0; c < cols; ++c) {
          const double p = std::exp(static_cast<double>(z[c] - max)) * inv_sum;
          d[c] = static_cast<float>(grad_scale * (p - (c == label ? 1.0 : 0.0)));
        }
      }
    }
    return result;
  }

  XentResult SigmoidCrossEntropy(int n, const float* logits, const float* labels, float grad_scale,
                                 float* dlogits) override {
    XentResult result;
    for (int i = 0; i < n; ++i) {
      const double z = logits[i];
      const double y = labels[i];
      result.loss_sum += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)));
      if ((z > 0) == (y > 0.5)) ++result.correct;
      if (dlogits != nullptr) dlogits[i] = static_cast<float>(grad_scale * (StableSigmoid(z) - y));
    }
    return result;
  }

  void Sigmoid(int64_t n, const float* x, float* y) override {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(StableSigmoid(x[i]));
  }

  void CsrMatMul(const CsrMatrix& a, int cols, const float* b, int b_stride, bool accumulate, float* c,
                 int c_stride) override {
    // One output row at a time in a scratch row, so the inner loop is a contiguous axpy that
    // vectorizes; the per-element order (entries in order, from 0, then store or add) is the
    // contract every backend keeps.
    row_.resize(cols);
    float* acc = row_.data();
    for (int r = 0; r < a.rows; ++r) {
      std::fill(acc, acc + cols, 0.0f);
      for (int32_t j = a.offsets[r]; j < a.offsets[r + 1]; ++j) {
        const float v = a.values[j];
        const float* src = b + static_cast<int64_t>(a.indices[j]) * b_stride;
        for (int k = 0; k < cols; ++k) acc[k] += v * src[k];
      }
      float* out = c + static_cast<int64_t>(r) * c_stride;
      if (accumulate) {
        for (int k = 0; k < cols; ++k) out[k] += acc[k];
      } else {
        std::copy(acc, acc + cols, out);
      }
    }
  }

  void CopyMatrix(int rows, int cols, const float* src, int src_stride, float* dst, int dst_stride) override {
    for (int r = 0; r < rows; ++r) {
      std::copy(src + static_cast<int64_t>(r) * src_stride, src + static_cast<int64_t>(r) * src_stride + cols,
                dst + static_cast<int64_t>(r) * dst_stride);
    }
  }

  void PairwiseDotsForward(int rows, int fields, int dim, const float* x, int stride, float* y) override {
    for (int r = 0; r < rows; ++r) {
      const float* row = x + static_cast<int64_t>(r) * stride;
      float term = 0.0f;
      for (int d = 0; d < dim; ++d) {
        float s = 0.0f;
        float q = 0.0f;
        for (int f = 0; f < fields; ++f) {
          const float v = row[f * dim + d];
          s += v;
          q += v * v;
        }
        term += s * s - q;
      }
      y[r] += 0.5f * term;
    }
  }

  void PairwiseDotsBackward(int rows, int fields, int dim, const float* x, int stride, const float* dy, float* dx,
                            int dx_stride) override {
    for (int r = 0; r < rows; ++r) {
      const float* row = x + static_cast<int64_t>(r) * stride;
      float* grad = dx + static_cast<int64_t>(r) * dx_stride;
      for (int d = 0; d < dim; ++d) {
        float s = 0.0f;
        for (int f = 0; f < fields; ++f) s += row[f * dim + d];
        for (int f = 0; f < fields; ++f) grad[f * dim + d] += dy[r] * (s - row[f * dim + d]);
      }
    }
  }

  void Im2Col(int n, const Window2d& window, const float* x, float* col) override {
    ForEachColEntry(n, window,
                    [&](int64_t col_index, int64_t x_index) { col[col_index] = x_index < 0 ? 0.0f : x[x_index]; });
  }

  void Col2Im(int n, const Window2d& window, const float* col, float* x) override {
    ForEachColEntry(n, window, [&](int64_t col_index, int64_t x_index) {
      if (x_index >= 0) x[x_index] += col[col_index];
    });
  }

  void MaxPoolForward(int n, const Window2d& window, const float* x, float* y, int32_t* argmax) override {
    CHECK_EQ(window.padding, 0) << "max pooling takes no padding";
    const int out_h = window.out_height(), out_w = window.out_width();
    const int64_t planes = static_cast<int64_t>(n) * window.channels;
    for (int64_t p = 0; p < planes; ++p) {
      const float* plane = x + p * window.height * window.width;
      const int64_t out_base = p * out_h * out_w;
      for (int oh = 0; oh < out_h; ++oh) {
        for (int ow = 0; ow < out_w; ++ow) {
          int best = (oh * window.stride) * window.width + ow * window.stride;
          for (int kh = 0; kh < window.kernel; ++kh) {
            const int row = (oh * window.stride + kh) * window.width + ow * window.stride;
            for (int kw = 0; kw < window.kernel; ++kw) {
              if (plane[row + kw] > plane[best]) best = row + kw;
            }
          }
          y[out_base + oh * out_w + ow] = plane[best];
          argmax[out_base + oh * out_w + ow] = best;
        }
      }
    }
  }

  void MaxPoolBackward(int n, const Window2d& window, const int32_t* argmax, const float* dy, float* dx) override {
    const int64_t plane_in = static_cast<int64_t>(window.height) * window.width;
    const int64_t plane_out = window.col_cols();
    const int64_t planes = static_cast<int64_t>(n) * window.channels;
    std::fill(dx, dx + planes * plane_in, 0.0f);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t o = 0; o < plane_out; ++o) {
        dx[p * plane_in + argmax[p * plane_out + o]] += dy[p * plane_out + o];
      }
    }
  }

 private:
  // Calls f(col_index, x_index) for every entry of the Im2Col matrix of n images, x_index = -1
  // where the entry is padding. One walk serves both directions, so they stay adjoint.
  template <typename F>
  static void ForEachColEntry(int n, const Window2d& w, F f) {
    const int out_h = w.out_height(), out_w = w.out_width();
    int64_t col_index = 0;
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < w.channels; ++c) {
        const int64_t plane = (static_cast<int64_t>(i) * w.channels + c) * w.height * w.width;
        for (int kh = 0; kh < w.kernel; ++kh) {
          for (int kw = 0; kw < w.kernel; ++kw) {
            for (int oh = 0; oh < out_h; ++oh) {
              const int h = oh * w.stride - w.padding + kh;
              const bool row_inside = h >= 0 && h < w.height;
              for (int ow = 0; ow < out_w; ++ow, ++col_index) {
                const int x_col = ow * w.stride - w.padding + kw;
                const bool inside = row_inside && x_col >= 0 && x_col < w.width;
                f(col_index, inside ? plane + static_cast<int64_t>(h) * w.width + x_col : -1);
              }
            }
          }
        }
      }
    }
  }

  // 1 / (1 + exp(-z)) written so that exp never overflows: exp(-|z|) <= 1.
  static double StableSigmoid(double z) {
    const double e = std::exp(-std::fabs(z));
    return z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
  }

  // Scratch kept to avoid an allocation per call.
  std::vector<float> sums_;  // ColumnSums
  std::vector<float> row_;   // CsrMatMul
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend() { return std::make_unique<CpuBackend>(); }

void SetCpuThreads(int threads) {
  CHECK_GE(threads, 1);
  openblas_set_num_threads(threads);
}

}  // namespace model
}  // namespace pstrain
