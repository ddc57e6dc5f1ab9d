#include "model/linear.h"

#include <glog/logging.h>

namespace pstrain {
namespace model {

Linear::Linear(int in_features, int out_features) : in_(in_features), out_(out_features) {
  CHECK_GT(in_, 0);
  CHECK_GT(out_, 0);
}

void Linear::Forward(Backend* backend, int n, const float* x, const float* w, const float* b, float* y) const {
  if (n == 0) return;
  backend->Gemm(/*trans_a=*/false, /*trans_b=*/false, n, out_, in_, 1.0f, x, w, 0.0f, y);
  backend->AddBias(n, out_, b, y);
}

void Linear::Backward(Backend* backend, int n, const float* x, const float* w, const float* dy, float* dw, float* db,
                      float* dx) const {
  // With n == 0 the Gemm has k == 0 and the column sums no rows: both write zeros.
  backend->Gemm(/*trans_a=*/true, /*trans_b=*/false, in_, out_, n, 1.0f, x, dy, 0.0f, dw);
  backend->ColumnSums(n, out_, dy, 1.0f, 0.0f, db);
  if (dx != nullptr && n > 0) {
    backend->Gemm(/*trans_a=*/false, /*trans_b=*/true, n, in_, out_, 1.0f, dy, w, 0.0f, dx);
  }
}

}  // namespace model
}  // namespace pstrain
