// 2-D convolution over NCHW images: y[i][o] = b[o] + sum_c W[o][c] (*) x[i][c], K x K kernel,
// stride S, zero padding P.
//
// Shapes: x {n, in_c, H, W}, weight {out_c, in_c*K*K} (row o is filter o flattened as (c, kh, kw),
// the Im2Col row order), bias {out_c}, y {n, out_c, OH, OW} with OH = (H + 2P - K) / S + 1 and
// likewise OW. The input size is fixed at construction so the output size is known up front.
//
// Like Linear, the layer holds only its sizes; weights, gradients and activations are backend
// memory owned by the caller. Each image is one GEMM over its Im2Col matrix, which lives in a
// caller-provided workspace of workspace_elements() floats (independent of n, so one buffer serves
// every batch size).
//
// Flatten needs no layer: an NCHW activation {n, C, H, W} is already the row-major {n, C*H*W}
// matrix a following Linear reads, and its gradient comes back in the same layout.
//
// Thread safety: const methods only; safe to share, but the Backend passed in is not thread-safe.
#ifndef PSTRAIN_MODEL_CONV2D_H_
#define PSTRAIN_MODEL_CONV2D_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/backend.h"

namespace pstrain {
namespace model {

class Conv2d {
 public:
  // OK when a Conv2d with these sizes can be built; otherwise INVALID_ARGUMENT naming the bad
  // size and what was expected. For sizes that come from configuration rather than code.
  static absl::Status Validate(int in_channels, int out_channels, int kernel, int stride, int padding, int height,
                               int width);

  // REQUIRES: Validate(...) is OK.
  Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, int height, int width);

  int out_height() const { return window_.out_height(); }
  int out_width() const { return window_.out_width(); }
  const Window2d& window() const { return window_; }
  int64_t input_elements() const { return window_.image_elements(); }  // per image
  int64_t output_elements() const {                                    // per image
    return static_cast<int64_t>(out_channels_) * window_.col_cols();
  }
  int64_t weight_elements() const { return out_channels_ * window_.col_rows(); }
  int64_t bias_elements() const { return out_channels_; }
  // Floats of scratch backend memory Forward and Backward need, for any n.
  int64_t workspace_elements() const { return (window_.col_rows() + 1) * window_.col_cols(); }

  // y = conv(x, w) + b over n images (n >= 0). y is overwritten; workspace is clobbered.
  void Forward(Backend* backend, int n, const float* x, const float* w, const float* b, float* y,
               float* workspace) const;

  // Given dy = dLoss/dy for the n images of the forward pass that read x, writes dw {out_c,
  // in_c*K*K} and db {out_c} (overwritten, not accumulated; zeros when n == 0) and, unless dx is
  // null (the first layer), dx {n, in_c, H, W}. workspace is clobbered.
  void Backward(Backend* backend, int n, const float* x, const float* w, const float* dy, float* dw, float* db,
                float* dx, float* workspace) const;

 private:
  Window2d window_;  // the input geometry and kernel
  int out_channels_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CONV2D_H_
