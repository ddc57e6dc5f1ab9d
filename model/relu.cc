#include "model/relu.h"

#include <cstdint>

#include <glog/logging.h>

namespace pstrain {
namespace model {

Relu::Relu(int features) : features_(features) { CHECK_GT(features_, 0); }

void Relu::Forward(Backend* backend, int n, const float* x, float* y) const {
  backend->ReluForward(static_cast<int64_t>(n) * features_, x, y);
}

void Relu::Backward(Backend* backend, int n, const float* y, const float* dy, float* dx) const {
  backend->ReluBackward(static_cast<int64_t>(n) * features_, y, dy, dx);
}

}  // namespace model
}  // namespace pstrain
