// The CUDA backend (see cuda_backend.h). Built only with CUDA; no_cuda.cc stands in otherwise.
//
// Streams and ordering:
//
//   compute_  kernels, cuBLAS, the loss result copies  ----record compute_done_---.
//                                                                                  v
//   copy_     Upload/Download through the pinned staging buffer (waits for compute_done_ first,
//             so a copy never overtakes a kernel that still reads or writes its memory)
//             ----record copy_done_----> compute_ waits for it (later kernels see uploaded data)
//
// Both streams are non-blocking, so they never serialize against the legacy default stream that
// other code in the process might use.
#include "model/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "model/cuda/kernels.h"

namespace pstrain {
namespace model {
namespace {

// Copies larger than this go through the staging buffer in chunks, so it stays small.
constexpr size_t kMaxStagingBytes = size_t{32} << 20;
// The staging buffer's first size: a whole MLP batch or parameter vector in one go.
constexpr size_t kMinStagingBytes = size_t{1} << 20;

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options) : device_(options.device), allow_tf32_(options.allow_tf32) {}

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (compute_ != nullptr) cudaStreamSynchronize(compute_);
    if (copy_ != nullptr) cudaStreamSynchronize(copy_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
    if (copy_done_ != nullptr) cudaEventDestroy(copy_done_);
    if (compute_ != nullptr) cudaStreamDestroy(compute_);
    if (copy_ != nullptr) cudaStreamDestroy(copy_);
    if (xent_device_ != nullptr) cudaFree(xent_device_);
    if (xent_host_ != nullptr) cudaFreeHost(xent_host_);
    if (staging_ != nullptr) cudaFreeHost(staging_);
  }

  // Creates the streams, events, cuBLAS handle and result buffers; INTERNAL on failure (the
  // destructor releases whatever was created).
  absl::Status Init() {
    absl::Status status = Check(cudaSetDevice(device_), "cudaSetDevice");
    if (status.ok()) {
      status = Check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate (compute)");
    }
    if (status.ok()) {
      status = Check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate (copy)");
    }
    if (status.ok()) {
      status = Check(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "cudaEventCreate");
    }
    if (status.ok()) {
      status = Check(cudaEventCreateWithFlags(&copy_done_, cudaEventDisableTiming), "cudaEventCreate");
    }
    if (status.ok()) status = CheckBlas(cublasCreate(&blas_), "cublasCreate");
    if (status.ok()) status = CheckBlas(cublasSetStream(blas_, compute_), "cublasSetStream");
    if (status.ok()) {
      status = CheckBlas(cublasSetMathMode(blas_, allow_tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                         "cublasSetMathMode");
    }
    if (status.ok()) {
      status = Check(cudaMalloc(reinterpret_cast<void**>(&xent_device_), sizeof(cuda::XentSums)),
                     "cudaMalloc (loss result)");
    }
    if (status.ok()) {
      status = Check(cudaMallocHost(reinterpret_cast<void**>(&xent_host_), sizeof(cuda::XentSums)),
                     "cudaMallocHost (loss result)");
    }
    return status;
  }

  std::string name() const override { return absl::StrCat("cuda:", device_); }

  // ---- Memory -----------------------------------------------------------------------------------

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    Bind();
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so it is not reported again
      return absl::ResourceExhaustedError(absl::StrCat(
          name(), ": cannot allocate ", bytes, " bytes of device memory (cudaMalloc: ", cudaGetErrorString(err), ")"));
    }
    if (err != cudaSuccess) return Check(err, absl::StrCat("cudaMalloc of ", bytes, " bytes"));
    return ptr;
  }

  void Free(void* ptr) override {
    if (ptr == nullptr) return;
    Bind();
    Note(cudaFree(ptr), "cudaFree");
  }

  absl::Status Upload(const void* host_src, size_t bytes, void* dst) override {
    if (absl::Status pending = TakePending(); !pending.ok() || bytes == 0) return pending;
    Bind();
    // Kernels queued before this call may still read dst: the copy waits for them.
    RETURN_IF_ERROR(Check(cudaEventRecord(compute_done_, compute_), "cudaEventRecord"));
    RETURN_IF_ERROR(Check(cudaStreamWaitEvent(copy_, compute_done_, 0), "cudaStreamWaitEvent"));
    RETURN_IF_ERROR(GrowStaging(bytes));
    const char* src = static_cast<const char*>(host_src);
    char* out = static_cast<char*>(dst);
    for (size_t offset = 0; offset < bytes; offset += staging_bytes_) {
      const size_t chunk = std::min(staging_bytes_, bytes - offset);
      std::memcpy(staging_, src + offset, chunk);
      RETURN_IF_ERROR(Check(cudaMemcpyAsync(out + offset, staging_, chunk, cudaMemcpyHostToDevice, copy_),
                            "cudaMemcpyAsync (upload)"));
      RETURN_IF_ERROR(Check(cudaEventRecord(copy_done_, copy_), "cudaEventRecord"));
      // The staging buffer is free again once the chunk has arrived.
      RETURN_IF_ERROR(Check(cudaEventSynchronize(copy_done_), "upload"));
    }
    // Kernels queued after this call read dst only after the copy.
    RETURN_IF_ERROR(Check(cudaStreamWaitEvent(compute_, copy_done_, 0), "cudaStreamWaitEvent"));
    return absl::OkStatus();
  }

  absl::Status Download(const void* src, size_t bytes, void* host_dst) override {
    if (absl::Status pending = TakePending(); !pending.ok() || bytes == 0) return pending;
    Bind();
    // The data is what the kernels queued so far leave there.
    RETURN_IF_ERROR(Check(cudaEventRecord(compute_done_, compute_), "cudaEventRecord"));
    RETURN_IF_ERROR(Check(cudaStreamWaitEvent(copy_, compute_done_, 0), "cudaStreamWaitEvent"));
    RETURN_IF_ERROR(GrowStaging(bytes));
    const char* in = static_cast<const char*>(src);
    char* out = static_cast<char*>(host_dst);
    for (size_t offset = 0; offset < bytes; offset += staging_bytes_) {
      const size_t chunk = std::min(staging_bytes_, bytes - offset);
      RETURN_IF_ERROR(Check(cudaMemcpyAsync(staging_, in + offset, chunk, cudaMemcpyDeviceToHost, copy_),
                            "cudaMemcpyAsync (download)"));
      RETURN_IF_ERROR(Check(cudaEventRecord(copy_done_, copy_), "cudaEventRecord"));
      // Waits for the queued kernels too; a kernel that failed reports here.
      RETURN_IF_ERROR(Check(cudaEventSynchronize(copy_done_), "download"));
      std::memcpy(out + offset, staging_, chunk);
    }
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    Bind();
    Note(cudaStreamSynchronize(compute_), "cudaStreamSynchronize (compute)");
    Note(cudaStreamSynchronize(copy_), "cudaStreamSynchronize (copy)");
    Note(cudaGetLastError(), "a kernel");
    return TakePending();
  }

  // ---- Kernels ----------------------------------------------------------------------------------

  void Fill(int64_t n, float value, float* x) override {
    Bind();
    cuda::LaunchFill(compute_, n, value, x);
    NoteLaunch("Fill");
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
            float* c) override {
    if (m == 0 || n == 0) return;
    Bind();
    if (k == 0) {  // C = beta * C, with beta == 0 clearing garbage (as on the CPU)
      cuda::LaunchScale(compute_, static_cast<int64_t>(m) * n, beta, c);
      NoteLaunch("Gemm (k == 0)");
      return;
    }
    // cuBLAS is column-major, and a row-major matrix is its transpose in column-major. So the
    // row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: swap the operands and
    // pass the row-major leading dimensions unchanged.
    const int lda = trans_a ? m : k;
    const int ldb = trans_b ? k : n;
    NoteBlas(cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                         &alpha, b, ldb, a, lda, &beta, c, n),
             "cublasSgemm");
  }

  void AddBias(int rows, int cols, const float* bias, float* x) override {
    Bind();
    cuda::LaunchAddBias(compute_, rows, cols, bias, x);
    NoteLaunch("AddBias");
  }

  void ColumnSums(int rows, int cols, const float* x, float alpha, float beta, float* out) override {
    Bind();
    cuda::LaunchColumnSums(compute_, rows, cols, x, alpha, beta, out);
    NoteLaunch("ColumnSums");
  }

  void ReluForward(int64_t n, const float* x, float* y) override {
    Bind();
    cuda::LaunchReluForward(compute_, n, x, y);
    NoteLaunch("ReluForward");
  }

  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    Bind();
    cuda::LaunchReluBackward(compute_, n, y, dy, dx);
    NoteLaunch("ReluBackward");
  }

  XentResult SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels, float grad_scale,
                                 float* dlogits) override {
    Bind();
    cuda::LaunchSoftmaxCrossEntropy(compute_, rows, cols, logits, labels, grad_scale, dlogits, xent_device_);
    NoteLaunch("SoftmaxCrossEntropy");
    return FetchXentSums("SoftmaxCrossEntropy");
  }

  XentResult SigmoidCrossEntropy(int n, const float* logits, const float* labels, float grad_scale,
                                 float* dlogits) override {
    Bind();
    cuda::LaunchSigmoidCrossEntropy(compute_, n, logits, labels, grad_scale, dlogits, xent_device_);
    NoteLaunch("SigmoidCrossEntropy");
    return FetchXentSums("SigmoidCrossEntropy");
  }

  void Sigmoid(int64_t n, const float* x, float* y) override {
    Bind();
    cuda::LaunchSigmoid(compute_, n, x, y);
    NoteLaunch("Sigmoid");
  }

  void CsrMatMul(const CsrMatrix& a, int cols, const float* b, int b_stride, bool accumulate, float* c,
                 int c_stride) override {
    Bind();
    cuda::LaunchCsrMatMul(compute_, a, cols, b, b_stride, accumulate, c, c_stride);
    NoteLaunch("CsrMatMul");
  }

  void CopyMatrix(int rows, int cols, const float* src, int src_stride, float* dst, int dst_stride) override {
    Bind();
    cuda::LaunchCopyMatrix(compute_, rows, cols, src, src_stride, dst, dst_stride);
    NoteLaunch("CopyMatrix");
  }

  void PairwiseDotsForward(int rows, int fields, int dim, const float* x, int stride, float* y) override {
    Bind();
    cuda::LaunchPairwiseDotsForward(compute_, rows, fields, dim, x, stride, y);
    NoteLaunch("PairwiseDotsForward");
  }

  void PairwiseDotsBackward(int rows, int fields, int dim, const float* x, int stride, const float* dy, float* dx,
                            int dx_stride) override {
    Bind();
    cuda::LaunchPairwiseDotsBackward(compute_, rows, fields, dim, x, stride, dy, dx, dx_stride);
    NoteLaunch("PairwiseDotsBackward");
  }

  void Im2Col(int n, const Window2d& window, const float* x, float* col) override {
    Bind();
    cuda::LaunchIm2Col(compute_, n, window, x, col);
    NoteLaunch("Im2Col");
  }

  void Col2Im(int n, const Window2d& window, const float* col, float* x) override {
    Bind();
    cuda::LaunchCol2Im(compute_, n, window, col, x);
    NoteLaunch("Col2Im");
  }

  void MaxPoolForward(int n, const Window2d& window, const float* x, float* y, int32_t* argmax) override {
    Bind();
    cuda::LaunchMaxPoolForward(compute_, n, window, x, y, argmax);
    NoteLaunch("MaxPoolForward");
  }

  void MaxPoolBackward(int n, const Window2d& window, const int32_t* argmax, const float* dy, float* dx) override {
    Bind();
    cuda::LaunchMaxPoolBackward(compute_, n, window, argmax, dy, dx);
    NoteLaunch("MaxPoolBackward");
  }

 private:
  // The calling thread's current device may be another one (CUDA keeps it per thread, and a
  // backend may be driven from any one thread at a time): make it ours before every call.
  void Bind() { Note(cudaSetDevice(device_), "cudaSetDevice"); }

  // Copies the sums a loss kernel left in xent_device_ to the host: one small copy on the compute
  // stream (ordered after the kernel), then a wait for it. On failure the result is zero; the
  // error comes from the next Download or Synchronize.
  XentResult FetchXentSums(absl::string_view kernel) {
    XentResult result;
    Note(cudaMemcpyAsync(xent_host_, xent_device_, sizeof(cuda::XentSums), cudaMemcpyDeviceToHost, compute_),
         "cudaMemcpyAsync (loss result)");
    const cudaError_t err = cudaStreamSynchronize(compute_);
    Note(err, kernel);
    if (err == cudaSuccess && pending_.ok()) {
      result.loss_sum = xent_host_->loss_sum;
      result.correct = xent_host_->correct;
    }
    return result;
  }

  // OK, or INTERNAL naming the backend, the call and CUDA's error text.
  absl::Status Check(cudaError_t err, absl::string_view what) const {
    if (err == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(name(), ": ", what, " failed: ", cudaGetErrorString(err)));
  }
  absl::Status CheckBlas(cublasStatus_t status, absl::string_view what) const {
    if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(name(), ": ", what, " failed: ", cublasGetStatusString(status)));
  }

  // Remembers the first failure until the next Upload, Download or Synchronize reports it.
  void Note(cudaError_t err, absl::string_view what) {
    if (err != cudaSuccess && pending_.ok()) pending_ = Check(err, what);
  }
  void NoteLaunch(absl::string_view kernel) { Note(cudaGetLastError(), kernel); }
  void NoteBlas(cublasStatus_t status, absl::string_view what) {
    if (pending_.ok()) pending_ = CheckBlas(status, what);
  }
  absl::Status TakePending() { return std::exchange(pending_, absl::OkStatus()); }

  // Makes the staging buffer hold min(bytes, kMaxStagingBytes). It only grows, so steady-state
  // copies allocate nothing.
  absl::Status GrowStaging(size_t bytes) {
    const size_t want = std::min(std::max(bytes, kMinStagingBytes), kMaxStagingBytes);
    if (staging_bytes_ >= want) return absl::OkStatus();
    if (staging_ != nullptr) {
      // Nothing uses it: every copy waits for its chunk before returning.
      cudaFreeHost(staging_);
      staging_ = nullptr;
      staging_bytes_ = 0;
    }
    const cudaError_t err = cudaMallocHost(&staging_, want);
    if (err != cudaSuccess) {
      staging_ = nullptr;
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return absl::ResourceExhaustedError(
            absl::StrCat(name(), ": cannot allocate ", want, " bytes of pinned host memory for copies"));
      }
      return Check(err, "cudaMallocHost (staging)");
    }
    staging_bytes_ = want;
    return absl::OkStatus();
  }

  // Constant after construction.
  const int device_;
  const bool allow_tf32_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;  // recorded on compute_ before a copy
  cudaEvent_t copy_done_ = nullptr;     // recorded on copy_ after each chunk
  cublasHandle_t blas_ = nullptr;
  cuda::XentSums* xent_device_ = nullptr;  // the loss kernels' sums (device memory)
  cuda::XentSums* xent_host_ = nullptr;    // where they are copied (pinned host memory)

  // Grown on demand.
  void* staging_ = nullptr;  // pinned host memory
  size_t staging_bytes_ = 0;

  absl::Status pending_;  // the first failure since the last report
};

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return count;
}

bool CudaBuilt() { return true; }

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(const CudaOptions& options) {
  const std::string name = absl::StrCat("cuda:", options.device);
  if (options.device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected a device index >= 0"));
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (options.device >= count) {
    std::string message = absl::StrCat(name, ": this machine has ", count, " CUDA device(s)");
    if (err != cudaSuccess) absl::StrAppend(&message, " (", cudaGetErrorString(err), ")");
    return absl::FailedPreconditionError(message);
  }
  auto backend = std::make_unique<CudaBackend>(options);
  RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace model
}  // namespace pstrain
