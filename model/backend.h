// The compute backend: the only place where model arithmetic happens.
//
// Layers and the MLP never touch OpenBLAS (or CUDA) themselves; they allocate memory, move data and
// run the few kernels below through a Backend. A backend owns "backend memory": on the CPU backend
// that is plain host memory, on a GPU backend it is device memory that the host must not
// dereference. Every pointer argument of the kernels is backend memory, except where a comment
// says "host". All matrices are row-major and densely packed (leading dimension = row length).
//
// Errors: memory operations return a Status. Kernels return nothing: they cannot fail on valid
// arguments (argument errors are programmer errors), and a device backend that runs them
// asynchronously reports a failed kernel from the next Download or Synchronize.
//
// Thread safety: a Backend instance is not thread-safe; use one per thread (each Mlp borrows one).
#ifndef PSTRAIN_MODEL_BACKEND_H_
#define PSTRAIN_MODEL_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {
namespace model {

// What the loss kernels (SoftmaxCrossEntropy, SigmoidCrossEntropy) return to the host.
struct XentResult {
  double loss_sum = 0;  // sum over rows of the loss: -log of the probability of the label
  int64_t correct = 0;  // rows whose prediction equals the label (see each kernel)
};

// A sparse matrix in compressed sparse row (CSR) form, its three arrays in backend memory
// (borrowed). Row r holds the entries [offsets[r], offsets[r + 1]): value values[j] in column
// indices[j]. A column may repeat within a row; its values then add. REQUIRES (checked where the
// matrix is built, not by the kernels): offsets has rows + 1 entries, starts at 0 and never
// decreases; every index lies in [0, cols).
struct CsrMatrix {
  int rows = 0;
  int cols = 0;
  const int32_t* offsets = nullptr;
  const int32_t* indices = nullptr;
  const float* values = nullptr;
};

// A KxK window sliding over a batch of images laid out NCHW (image-major, then channel, row,
// column; densely packed), as convolution and pooling use it. Window position (oh, ow) covers input
// rows oh*stride - padding + [0, kernel) and columns ow*stride - padding + [0, kernel); positions
// outside the image are zero padding. REQUIRES (checked by the layers, not the kernels): all sizes
// > 0 except padding >= 0, and height + 2*padding >= kernel, width + 2*padding >= kernel.
struct Window2d {
  int channels = 0;
  int height = 0;
  int width = 0;
  int kernel = 0;
  int stride = 1;
  int padding = 0;

  int out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  int out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
  int64_t image_elements() const { return static_cast<int64_t>(channels) * height * width; }
  // Rows and columns of one image's Im2Col matrix.
  int64_t col_rows() const { return static_cast<int64_t>(channels) * kernel * kernel; }
  int64_t col_cols() const { return static_cast<int64_t>(out_height()) * out_width(); }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // A short name for logs: "cpu", "cuda:0".
  virtual std::string name() const = 0;

  // ---- Memory -------------------------------------------------------------------------------

  // Allocates `bytes` of backend memory, aligned for floats (at least 64 bytes on CPU). bytes == 0
  // gives a null pointer and OK. RESOURCE_EXHAUSTED when the memory is not there. The caller owns
  // the block and returns it with Free.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // Releases a block from Allocate; null is ignored.
  virtual void Free(void* ptr) = 0;

  // Copies `bytes` from host memory to backend memory / from backend memory to host memory.
  // Block until the copy is done (Download also waits for queued kernels). A non-OK status is a
  // device failure (INTERNAL) and may belong to an earlier kernel.
  virtual absl::Status Upload(const void* host_src, size_t bytes, void* dst) = 0;
  virtual absl::Status Download(const void* src, size_t bytes, void* host_dst) = 0;

  // Waits for every queued kernel; reports the first failure since the last check.
  virtual absl::Status Synchronize() = 0;

  // ---- Kernels ------------------------------------------------------------------------------

  // x[0, n) = value.
  virtual void Fill(int64_t n, float value, float* x) = 0;

  // C = alpha * op(A) * op(B) + beta * C, with op(A) m x k, op(B) k x n, C m x n, all row-major:
  // A is stored m x k (k x m when trans_a), B is stored k x n (n x k when trans_b). beta == 0
  // overwrites C (its old contents may be garbage).
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b,
                    float beta, float* c) = 0;

  // x[r][c] += bias[c] for x of rows x cols.
  virtual void AddBias(int rows, int cols, const float* bias, float* x) = 0;

  // out[c] = alpha * sum_r x[r][c] + beta * out[c]. beta == 0 overwrites out.
  virtual void ColumnSums(int rows, int cols, const float* x, float alpha, float beta, float* out) = 0;

  // y = max(x, 0) over n elements. x == y is allowed.
  virtual void ReluForward(int64_t n, const float* x, float* y) = 0;
  // dx = dy where y > 0, else 0; y is the forward output. dy == dx is allowed.
  virtual void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) = 0;

  // Row-wise softmax cross-entropy of logits (rows x cols) against labels (rows int32 in backend
  // memory). REQUIRES: every label in [0, cols) (callers check on the host first). If dlogits is
  // not null it receives grad_scale * (softmax(logits) - onehot(label)), e.g. grad_scale = 1/n for
  // the gradient of the mean loss. dlogits may equal logits. A row is correct when its arg-max
  // logit (first on ties) is the label. Blocks until the result is known.
  virtual XentResult SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                         float grad_scale, float* dlogits) = 0;

  // Binary cross-entropy with logits, the loss of a one-logit classifier: for logit z and label y
  // in [0, 1], loss = -y log sigmoid(z) - (1 - y) log(1 - sigmoid(z)), computed as
  // max(z, 0) - z y + log1p(exp(-|z|)) so no logit overflows. A row is correct when
  // (sigmoid(z) > 0.5) == (y > 0.5), i.e. (z > 0) == (y > 0.5). labels: n floats in backend memory
  // (callers check the range on the host). If dlogits is not null it receives
  // grad_scale * (sigmoid(z) - y); dlogits may equal logits. Blocks until the result is known.
  virtual XentResult SigmoidCrossEntropy(int n, const float* logits, const float* labels, float grad_scale,
                                         float* dlogits) = 0;

  // y = 1 / (1 + exp(-x)) over n elements, without overflow for large |x|. x == y is allowed.
  virtual void Sigmoid(int64_t n, const float* x, float* y) = 0;

  // ---- Sparse rows and strided copies -------------------------------------------------------

  // c = a * b (accumulate == false) or c += a * b (accumulate == true), with a sparse
  // (a.rows x a.cols), b dense a.cols x cols with row stride b_stride, c dense a.rows x cols with
  // row stride c_stride (strides >= cols, so b and c may be column blocks of wider matrices). Each
  // output element sums values[j] * b[indices[j]][col] over its row's entries in order, starting
  // from 0, and is then stored or added: every backend rounds the same way. This is the embedding
  // bag (model/embedding_bag.h): forward pools pulled rows with a sample x row matrix, backward
  // sends gradients back through its transpose, a gather per row instead of a scatter with atomics,
  // so the result does not depend on scheduling. c must not overlap b.
  virtual void CsrMatMul(const CsrMatrix& a, int cols, const float* b, int b_stride, bool accumulate, float* c,
                         int c_stride) = 0;

  // dst[r][c] = src[r][c] for r < rows, c < cols, with row strides src_stride and dst_stride
  // (>= cols): moves a block into or out of a column range of a wider matrix. The blocks must not
  // overlap.
  virtual void CopyMatrix(int rows, int cols, const float* src, int src_stride, float* dst, int dst_stride) = 0;

  // A factorization machine's second-order term (DeepFM's FM part, model/ctr_model.h). Row r of x
  // (at x + r * stride) holds `fields` vectors of `dim` floats side by side; the term is the sum
  // of the dot products of every pair of them, computed per column d as
  //   s_d = x_0d + x_1d + ... (in field order),  q_d = x_0d^2 + x_1d^2 + ... (in field order)
  //   term = 0.5 * ((s_0 * s_0 - q_0) + (s_1 * s_1 - q_1) + ...)  (in column order)
  // with every operation rounded on its own (no fused multiply-add), so every backend gives the
  // same bits. Forward adds term(r) to y[r]. Backward adds dy[r] * (s_d - x_fd), the term's
  // gradient times dy, to dx[r * dx_stride + f * dim + d]. x and dx must not overlap.
  virtual void PairwiseDotsForward(int rows, int fields, int dim, const float* x, int stride, float* y) = 0;
  virtual void PairwiseDotsBackward(int rows, int fields, int dim, const float* x, int stride, const float* dy,
                                    float* dx, int dx_stride) = 0;

  // ---- Convolution and pooling (NCHW, see Window2d) -----------------------------------------

  // Unfolds n images x {n, C, H, W} into col {n, C*K*K, OH*OW}: one col_rows() x col_cols() matrix
  // per image, image i at offset i * col_rows() * col_cols(), with
  //   col[i][(c*K + kh)*K + kw][oh*OW + ow] = x[i][c][oh*S - P + kh][ow*S - P + kw]
  // (0 where that pixel is padding). A convolution of image i with weights W {out_c, C*K*K} is then
  // the single product W * col[i] {out_c, OH*OW}, which is already output image i in NCHW.
  // col is overwritten entirely.
  virtual void Im2Col(int n, const Window2d& window, const float* x, float* col) = 0;
  // The adjoint of Im2Col: x[i][c][h][w] += every col entry that Im2Col copies from that pixel
  // (entries that map to padding are dropped). ACCUMULATES into x: clear it first with Fill for
  // a plain input gradient; then <Im2Col(x), col> == <x, Col2Im(col)> for every x and col.
  virtual void Col2Im(int n, const Window2d& window, const float* col, float* x) = 0;

  // Max pooling of n images x {n, C, H, W} into y {n, C, OH, OW}. argmax {n, C, OH, OW} (int32)
  // receives for each output the position h*W + w of its maximum within its own {H, W} plane; ties
  // go to the first in row-major window order. REQUIRES: window.padding == 0.
  virtual void MaxPoolForward(int n, const Window2d& window, const float* x, float* y, int32_t* argmax) = 0;
  // dx {n, C, H, W} = 0, then dx[i][c][argmax[i][c][oh][ow]] += dy[i][c][oh][ow] for every output
  // (overlapping windows, stride < kernel, may send several outputs to one input).
  virtual void MaxPoolBackward(int n, const Window2d& window, const int32_t* argmax, const float* dy, float* dx) = 0;
};

// A typed block of backend memory that frees itself. Move-only; the backend is borrowed and must
// outlive the buffer. Not thread-safe.
template <typename T>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  explicit BackendBuffer(Backend* backend) : backend_(backend) {}
  ~BackendBuffer() { Release(); }

  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  BackendBuffer(BackendBuffer&& other) noexcept { *this = std::move(other); }
  BackendBuffer& operator=(BackendBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      backend_ = std::exchange(other.backend_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }

  // Makes room for at least `count` elements. Contents are not kept when the buffer grows; a
  // buffer never shrinks, so steady-state calls allocate nothing. Errors come from Allocate.
  // REQUIRES: constructed with a backend.
  absl::Status Reserve(int64_t count) {
    if (count <= capacity_) return absl::OkStatus();
    Release();
    absl::StatusOr<void*> block = backend_->Allocate(static_cast<size_t>(count) * sizeof(T));
    if (!block.ok()) return block.status();
    data_ = static_cast<T*>(*block);
    capacity_ = count;
    return absl::OkStatus();
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t capacity() const { return capacity_; }

 private:
  void Release() {
    if (backend_ != nullptr && data_ != nullptr) backend_->Free(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_BACKEND_H_
