// The CUDA backend: the Backend kernels on one NVIDIA GPU, with cuBLAS for Gemm.
//
// Memory is device memory (cudaMalloc); the host must not dereference it. Kernels are queued on
// one compute stream per backend and return at once; Upload and Download go through a pinned host
// staging buffer on a second stream, ordered after the queued kernels with events, and block until
// the data has arrived. A failed kernel or cuBLAS call is reported as INTERNAL from the next
// Upload, Download or Synchronize (see model/backend.h).
//
// Several backends, in one process or in several, may share one GPU: each has its own streams and
// cuBLAS handle, and the GPU interleaves their work.
//
// This header includes no CUDA header and exists in every build: when the build has no CUDA
// (PSTRAIN_CUDA=OFF, or no nvcc found), NewCudaBackend fails with FAILED_PRECONDITION and
// CudaDeviceCount() is 0, so callers need no #ifdef.
//
// Thread safety: a backend is not thread-safe (see Backend); the functions below are.
#ifndef PSTRAIN_MODEL_CUDA_CUDA_BACKEND_H_
#define PSTRAIN_MODEL_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "model/backend.h"

namespace pstrain {
namespace model {

struct CudaOptions {
  // Index of the GPU, as CUDA numbers them (after CUDA_VISIBLE_DEVICES).
  int device = 0;
  // Let cuBLAS run float GEMMs on TF32 tensor cores: several times faster on large GEMMs, with
  // inputs rounded to a 10-bit mantissa (relative error ~1e-3 instead of ~1e-6). Off by default so
  // the GPU computes what the CPU computes.
  bool allow_tf32 = false;
};

// A backend on GPU options.device, named "cuda:N". FAILED_PRECONDITION when this build has no
// CUDA backend or the machine has no such device (the message says how many it has); INTERNAL
// with the CUDA or cuBLAS error text when the driver fails to set the device up.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(const CudaOptions& options);

// How many CUDA devices this process can use: 0 when the build has no CUDA, there is no driver or
// no device. Never fails.
int CudaDeviceCount();

// Whether this build has the CUDA backend (it may still find no device at run time).
bool CudaBuilt();

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CUDA_CUDA_BACKEND_H_
