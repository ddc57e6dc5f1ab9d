// The layout of a model's parameters: named tensors laid out back to back in one flat float vector.
//
// Every role agrees on this layout: servers cut tensors into chunks by it, workers push and pull
// gradients and weights in it, and the model file stores tensors in its order.
#ifndef PSTRAIN_MODEL_PARAM_SPEC_H_
#define PSTRAIN_MODEL_PARAM_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {
namespace model {

// How a tensor's initial values are drawn (see model/init.h).
enum class InitKind {
  kZeros,
  kHeUniform,      // uniform in [-sqrt(6/fan_in), sqrt(6/fan_in)]: layers followed by ReLU.
  kGlorotUniform,  // uniform in [-sqrt(6/(fan_in+fan_out)), ...]: the output layer.
};

// One parameter tensor.
struct ParamSpec {
  std::string name;            // "fc1.weight", "fc1.bias", "fc2.weight", ...
  std::vector<int64_t> shape;  // weight: {in, out}; bias: {out}
  int64_t num_elements = 0;    // product of shape
  int64_t flat_offset = 0;     // tensors laid out back to back in list order
  InitKind init = InitKind::kZeros;
  int64_t fan_in = 0, fan_out = 0;
};

// Sum of num_elements over `params`.
int64_t TotalElements(const std::vector<ParamSpec>& params);

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_PARAM_SPEC_H_
