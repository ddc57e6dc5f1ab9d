// Fully connected layer: y = x W + b.
//
// Shapes (row-major): x {n, in}, W {in, out}, b {out}, y {n, out}. The layer holds only its sizes;
// weights, gradients and activations are backend memory owned by the caller (the Mlp keeps all
// parameters in one flat buffer and hands the layer pointers into it).
//
// Thread safety: const methods only; safe to share, but the Backend passed in is not thread-safe.
#ifndef PSTRAIN_MODEL_LINEAR_H_
#define PSTRAIN_MODEL_LINEAR_H_

#include <cstdint>

#include "model/backend.h"

namespace pstrain {
namespace model {

class Linear {
 public:
  // REQUIRES: in_features > 0, out_features > 0.
  Linear(int in_features, int out_features);

  int in_features() const { return in_; }
  int out_features() const { return out_; }
  int64_t weight_elements() const { return static_cast<int64_t>(in_) * out_; }
  int64_t bias_elements() const { return out_; }

  // y = x W + b over n rows (n >= 0). y is overwritten.
  void Forward(Backend* backend, int n, const float* x, const float* w, const float* b, float* y) const;

  // Given dy = dLoss/dy for the n rows of the forward pass that read x:
  //   dw = x^T dy   {in, out}     db = colsum(dy)   {out}     dx = dy W^T   {n, in}
  // dw and db are overwritten (not accumulated); dx is skipped when null (the first layer).
  void Backward(Backend* backend, int n, const float* x, const float* w, const float* dy, float* dw, float* db,
                float* dx) const;

 private:
  int in_;
  int out_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_LINEAR_H_
