#include "model/device.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/cpu_backend.h"
#include "model/cuda/cuda_backend.h"

namespace pstrain {
namespace model {
namespace {

// The N of "cuda:N": plain decimal digits only (no sign, no spaces), or -1.
int ParseDeviceIndex(absl::string_view digits) {
  if (digits.empty() || digits.size() > 4) return -1;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int index = -1;
  return absl::SimpleAtoi(digits, &index) ? index : -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> NewBackendForDevice(absl::string_view device, bool allow_tf32) {
  if (device == "cpu") return NewCpuBackend();
  CudaOptions options;
  options.allow_tf32 = allow_tf32;
  if (device == "cuda") return NewCudaBackend(options);
  if (absl::StartsWith(device, "cuda:")) {
    options.device = ParseDeviceIndex(device.substr(5));
    if (options.device >= 0) return NewCudaBackend(options);
  }
  return absl::InvalidArgumentError(absl::StrCat("--device: got '", device, "', expected cpu, cuda or cuda:N"));
}

}  // namespace model
}  // namespace pstrain
