// 2-D max pooling over NCHW images: K x K windows at stride S, no padding.
//
// Shapes: x {n, C, H, W}, y {n, C, OH, OW} with OH = (H - K) / S + 1 and likewise OW (rows or
// columns past the last full window are dropped). Forward also writes argmax {n, C, OH, OW}
// (int32, backend memory, caller-owned), which Backward needs instead of x: it records which input
// each output came from (first maximum in the window on ties).
//
// Thread safety: const methods only; the Backend passed in is not thread-safe.
#ifndef PSTRAIN_MODEL_MAX_POOL2D_H_
#define PSTRAIN_MODEL_MAX_POOL2D_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/backend.h"

namespace pstrain {
namespace model {

class MaxPool2d {
 public:
  // OK when a MaxPool2d with these sizes can be built; otherwise INVALID_ARGUMENT naming the bad
  // size and what was expected.
  static absl::Status Validate(int channels, int height, int width, int kernel, int stride);

  // REQUIRES: Validate(...) is OK.
  MaxPool2d(int channels, int height, int width, int kernel, int stride);

  int out_height() const { return window_.out_height(); }
  int out_width() const { return window_.out_width(); }
  const Window2d& window() const { return window_; }
  int64_t input_elements() const { return window_.image_elements(); }  // per image
  int64_t output_elements() const {                                    // per image
    return static_cast<int64_t>(window_.channels) * window_.col_cols();
  }

  // y = max over each window, argmax = where it was, for n images (n >= 0). Both overwritten.
  void Forward(Backend* backend, int n, const float* x, float* y, int32_t* argmax) const;
  // dx = dy routed to the argmax positions of the forward pass, zero elsewhere (overwritten).
  void Backward(Backend* backend, int n, const int32_t* argmax, const float* dy, float* dx) const;

 private:
  Window2d window_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_MAX_POOL2D_H_
