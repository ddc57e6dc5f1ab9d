// Picks a compute backend by name, the way a --device flag spells it.
#ifndef PSTRAIN_MODEL_DEVICE_H_
#define PSTRAIN_MODEL_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/backend.h"

namespace pstrain {
namespace model {

// A new backend for `device`: "cpu" (NewCpuBackend), "cuda" (= "cuda:0") or "cuda:N"
// (NewCudaBackend on GPU N). allow_tf32 lets a CUDA backend use TF32 tensor cores (see
// CudaOptions); the CPU backend ignores it. INVALID_ARGUMENT for any other spelling; the CUDA
// backend's errors (FAILED_PRECONDITION: no CUDA in this build, or no such device) pass through.
absl::StatusOr<std::unique_ptr<Backend>> NewBackendForDevice(absl::string_view device, bool allow_tf32);

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_DEVICE_H_
