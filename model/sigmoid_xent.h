// Binary cross-entropy with logits: the loss layer of a one-logit (click / no click) classifier.
//
// For logits z {n} and labels y {n} in [0, 1], p = sigmoid(z):
//   loss_i = -y_i log p_i - (1 - y_i) log(1 - p_i) = max(z_i, 0) - z_i y_i + log1p(exp(-|z_i|))
//   dloss_i/dz_i = p_i - y_i
// The second form never overflows, so a confident wrong logit (z = -100, y = 1) costs 100, not
// infinity. A sample is correct when (p > 0.5) == (y > 0.5). Labels live in backend memory and
// must already be checked to lie in [0, 1] (the CTR model does that on the host).
//
// Thread safety: const methods only; the Backend passed in is not thread-safe.
#ifndef PSTRAIN_MODEL_SIGMOID_XENT_H_
#define PSTRAIN_MODEL_SIGMOID_XENT_H_

#include "model/backend.h"

namespace pstrain {
namespace model {

class SigmoidCrossEntropy {
 public:
  // Loss sum and correct count over n samples, no gradient. Blocks until the result is known.
  XentResult Forward(Backend* backend, int n, const float* logits, const float* labels) const;

  // The same, and dlogits = grad_scale * (p - y) for every sample (grad_scale = 1/N gives the
  // gradient of the mean loss over N samples). dlogits may equal logits.
  XentResult ForwardBackward(Backend* backend, int n, const float* logits, const float* labels, float grad_scale,
                             float* dlogits) const;

  // probabilities = sigmoid(logits) over n samples, what AUC and log loss are computed from.
  // probabilities may equal logits.
  void Probabilities(Backend* backend, int n, const float* logits, float* probabilities) const;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_SIGMOID_XENT_H_
