#include "model/max_pool2d.h"

#include <string>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace model {

absl::Status MaxPool2d::Validate(int channels, int height, int width, int kernel, int stride) {
  const std::string where = absl::StrCat("max_pool2d (channels ", channels, ", input ", height, "x", width, ", kernel ",
                                         kernel, ", stride ", stride, "): ");
  if (channels <= 0 || height <= 0 || width <= 0 || kernel <= 0 || stride <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "expected channels, input size, kernel and stride all > 0"));
  }
  if (kernel > height || kernel > width) {
    return absl::InvalidArgumentError(absl::StrCat(where, "kernel larger than the input"));
  }
  return absl::OkStatus();
}

MaxPool2d::MaxPool2d(int channels, int height, int width, int kernel, int stride) {
  const absl::Status valid = Validate(channels, height, width, kernel, stride);
  CHECK(valid.ok()) << valid;
  window_.channels = channels;
  window_.height = height;
  window_.width = width;
  window_.kernel = kernel;
  window_.stride = stride;
  window_.padding = 0;
}

void MaxPool2d::Forward(Backend* backend, int n, const float* x, float* y, int32_t* argmax) const {
  if (n == 0) return;
  backend->MaxPoolForward(n, window_, x, y, argmax);
}

void MaxPool2d::Backward(Backend* backend, int n, const int32_t* argmax, const float* dy, float* dx) const {
  if (n == 0) return;
  backend->MaxPoolBackward(n, window_, argmax, dy, dx);
}

}  // namespace model
}  // namespace pstrain
