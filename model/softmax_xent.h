// Softmax followed by cross-entropy against integer labels: the loss layer of a classifier.
//
// For logits z {n, classes} and labels l {n}:  loss_i = log(sum_c exp(z_ic)) - z_il,
// dLoss_i/dz_ic = softmax(z_i)_c - [c == l_i]. Labels live in backend memory and must already be
// checked to lie in [0, classes) (the Mlp does that on the host).
//
// Thread safety: const methods only; the Backend passed in is not thread-safe.
#ifndef PSTRAIN_MODEL_SOFTMAX_XENT_H_
#define PSTRAIN_MODEL_SOFTMAX_XENT_H_

#include <cstdint>

#include "model/backend.h"

namespace pstrain {
namespace model {

class SoftmaxCrossEntropy {
 public:
  // REQUIRES: classes >= 2.
  explicit SoftmaxCrossEntropy(int classes);

  int classes() const { return classes_; }

  // Loss sum and correct count over n rows, no gradient.
  XentResult Forward(Backend* backend, int n, const float* logits, const int32_t* labels) const;

  // Same, and dlogits = grad_scale * dLoss_i/dz for every row (grad_scale = 1/N gives the gradient
  // of the mean loss over N samples). dlogits may equal logits.
  XentResult ForwardBackward(Backend* backend, int n, const float* logits, const int32_t* labels, float grad_scale,
                             float* dlogits) const;

 private:
  int classes_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_SOFTMAX_XENT_H_
