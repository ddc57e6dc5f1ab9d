#include "model/sigmoid_xent.h"

namespace pstrain {
namespace model {

XentResult SigmoidCrossEntropy::Forward(Backend* backend, int n, const float* logits, const float* labels) const {
  if (n == 0) return XentResult();
  return backend->SigmoidCrossEntropy(n, logits, labels, 0.0f, nullptr);
}

XentResult SigmoidCrossEntropy::ForwardBackward(Backend* backend, int n, const float* logits, const float* labels,
                                                float grad_scale, float* dlogits) const {
  if (n == 0) return XentResult();
  return backend->SigmoidCrossEntropy(n, logits, labels, grad_scale, dlogits);
}

void SigmoidCrossEntropy::Probabilities(Backend* backend, int n, const float* logits, float* probabilities) const {
  backend->Sigmoid(n, logits, probabilities);
}

}  // namespace model
}  // namespace pstrain
