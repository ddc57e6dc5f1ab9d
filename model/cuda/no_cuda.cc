// The CUDA entry points of a build without CUDA (PSTRAIN_CUDA=OFF or no nvcc): nothing to create,
// no device, so callers need no #ifdef.
#include "model/cuda/cuda_backend.h"

#include "absl/status/status.h"

namespace pstrain {
namespace model {

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(const CudaOptions& options) {
  return absl::FailedPreconditionError("this build has no CUDA backend (configure with -DPSTRAIN_CUDA=ON)");
}

int CudaDeviceCount() { return 0; }

bool CudaBuilt() { return false; }

}  // namespace model
}  // namespace pstrain
