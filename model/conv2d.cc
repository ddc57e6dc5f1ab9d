#include "model/conv2d.h"

#include <string>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace model {

absl::Status Conv2d::Validate(int in_channels, int out_channels, int kernel, int stride, int padding, int height,
                              int width) {
  const std::string where =
      absl::StrCat("conv2d (in_channels ", in_channels, ", out_channels ", out_channels, ", kernel ", kernel,
                   ", stride ", stride, ", padding ", padding, ", input ", height, "x", width, "): ");
  if (in_channels <= 0 || out_channels <= 0 || kernel <= 0 || stride <= 0 || height <= 0 || width <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "expected channels, kernel, stride and input size all > 0"));
  }
  if (padding < 0 || padding >= kernel) {
    // padding >= kernel would add output pixels that see nothing but padding.
    return absl::InvalidArgumentError(absl::StrCat(where, "expected padding in [0, ", kernel - 1, "]"));
  }
  if (height + 2 * padding < kernel || width + 2 * padding < kernel) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "kernel larger than the padded input ", height + 2 * padding, "x", width + 2 * padding));
  }
  return absl::OkStatus();
}

Conv2d::Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, int height, int width)
    : out_channels_(out_channels) {
  const absl::Status valid = Validate(in_channels, out_channels, kernel, stride, padding, height, width);
  CHECK(valid.ok()) << valid;
  window_.channels = in_channels;
  window_.height = height;
  window_.width = width;
  window_.kernel = kernel;
  window_.stride = stride;
  window_.padding = padding;
}

// Workspace layout: col {C*K*K, OH*OW}, then ones {OH*OW}. The ones vector turns the bias
// broadcast and the bias gradient into GEMMs, so the layer needs no kernels beyond Im2Col/Col2Im.

void Conv2d::Forward(Backend* backend, int n, const float* x, const float* w, const float* b, float* y,
                     float* workspace) const {
  if (n == 0) return;
  const int rows = static_cast<int>(window_.col_rows());
  const int pixels = static_cast<int>(window_.col_cols());
  float* col = workspace;
  float* ones = workspace + window_.col_rows() * pixels;
  backend->Fill(pixels, 1.0f, ones);
  for (int i = 0; i < n; ++i) {
    float* y_i = y + i * output_elements();
    backend->Im2Col(1, window_, x + i * input_elements(), col);
    backend->Gemm(false, false, out_channels_, pixels, rows, 1.0f, w, col, 0.0f, y_i);
    // y_i += b * ones^T: a rank-1 update, adding b[o] to every pixel of channel o.
    backend->Gemm(false, false, out_channels_, pixels, 1, 1.0f, b, ones, 1.0f, y_i);
  }
}

void Conv2d::Backward(Backend* backend, int n, const float* x, const float* w, const float* dy, float* dw, float* db,
                      float* dx, float* workspace) const {
  const int rows = static_cast<int>(window_.col_rows());
  const int pixels = static_cast<int>(window_.col_cols());
  float* col = workspace;
  float* ones = workspace + window_.col_rows() * pixels;
  backend->Fill(weight_elements(), 0.0f, dw);
  backend->Fill(bias_elements(), 0.0f, db);
  if (n == 0) return;
  backend->Fill(pixels, 1.0f, ones);
  for (int i = 0; i < n; ++i) {
    const float* dy_i = dy + i * output_elements();
    backend->Im2Col(1, window_, x + i * input_elements(), col);
    // dw += dy_i col^T; db += dy_i ones (row sums of dy_i).
    backend->Gemm(false, true, out_channels_, rows, pixels, 1.0f, dy_i, col, 1.0f, dw);
    backend->Gemm(false, false, out_channels_, 1, pixels, 1.0f, dy_i, ones, 1.0f, db);
    if (dx != nullptr) {
      // dcol = W^T dy_i, reusing the col buffer (its forward copy is no longer needed).
      backend->Gemm(true, false, rows, pixels, out_channels_, 1.0f, w, dy_i, 0.0f, col);
      float* dx_i = dx + i * input_elements();
      backend->Fill(input_elements(), 0.0f, dx_i);
      backend->Col2Im(1, window_, col, dx_i);
    }
  }
}

}  // namespace model
}  // namespace pstrain
