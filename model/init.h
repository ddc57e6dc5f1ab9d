// Deterministic initial values for parameter tensors.
//
// The generator is counter-based: the value of element `index` of tensor `tensor_id` depends only
// on (seed, tensor_id, index), never on how a tensor is split or in which order pieces are filled.
// So one server holding a whole tensor and three servers each holding a chunk of it start from the
// same model, bit for bit.
//
// Each value is a 64-bit hash (splitmix64 rounds over the three keys) turned into a float uniform
// in [-bound, bound):
//   kZeros:         0
//   kHeUniform:     bound = sqrt(6 / fan_in)
//   kGlorotUniform: bound = sqrt(6 / (fan_in + fan_out))
//
// Thread safety: pure functions, safe from any thread.
#ifndef PSTRAIN_MODEL_INIT_H_
#define PSTRAIN_MODEL_INIT_H_

#include <cstdint>

#include "model/param_spec.h"

namespace pstrain {
namespace model {

// The initial value of element `index` (0-based within the tensor) of tensor `tensor_id` (its
// position in the parameter list). REQUIRES: 0 <= index < spec.num_elements; for the uniform
// kinds, fan_in > 0 (and fan_in + fan_out > 0 for Glorot).
float InitialValue(uint64_t seed, int tensor_id, int64_t index, const ParamSpec& spec);

// Writes the initial values of elements [offset, offset + length) of the tensor to out[0, length).
// Same values as InitialValue, element by element. REQUIRES: the range lies inside the tensor.
void FillInitialValues(uint64_t seed, int tensor_id, const ParamSpec& spec, int64_t offset, int64_t length, float* out);

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_INIT_H_
