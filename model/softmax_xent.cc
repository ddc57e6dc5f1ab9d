#include "model/softmax_xent.h"

#include <glog/logging.h>

namespace pstrain {
namespace model {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(int classes) : classes_(classes) { CHECK_GE(classes_, 2); }

XentResult SoftmaxCrossEntropy::Forward(Backend* backend, int n, const float* logits, const int32_t* labels) const {
  if (n == 0) return XentResult();
  return backend->SoftmaxCrossEntropy(n, classes_, logits, labels, 0.0f, nullptr);
}

XentResult SoftmaxCrossEntropy::ForwardBackward(Backend* backend, int n, const float* logits, const int32_t* labels,
                                                float grad_scale, float* dlogits) const {
  if (n == 0) return XentResult();
  return backend->SoftmaxCrossEntropy(n, classes_, logits, labels, grad_scale, dlogits);
}

}  // namespace model
}  // namespace pstrain
