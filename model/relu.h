// Rectified linear activation, y = max(x, 0), elementwise over {n, features}.
//
// Backward uses the forward OUTPUT (y > 0 exactly where x > 0), so the forward pass may run in
// place and the pre-activation need not be kept.
//
// Thread safety: const methods only; the Backend passed in is not thread-safe.
#ifndef PSTRAIN_MODEL_RELU_H_
#define PSTRAIN_MODEL_RELU_H_

#include "model/backend.h"

namespace pstrain {
namespace model {

class Relu {
 public:
  // REQUIRES: features > 0.
  explicit Relu(int features);

  int features() const { return features_; }

  // y = max(x, 0) over n rows. x == y is allowed.
  void Forward(Backend* backend, int n, const float* x, float* y) const;
  // dx = dy where y > 0, else 0. dy == dx is allowed.
  void Backward(Backend* backend, int n, const float* y, const float* dy, float* dx) const;

 private:
  int features_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_RELU_H_
