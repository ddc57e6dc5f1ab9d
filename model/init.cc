#include "model/init.h"

#include <cmath>

#include <glog/logging.h>

namespace pstrain {
namespace model {
namespace {

// The splitmix64 finalizer: a bijective mix whose output bits each depend on all input bits.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The key of one tensor: every element hash starts from it, so computing it once per fill keeps
// the per-element cost at one Mix64.
inline uint64_t TensorKey(uint64_t seed, int tensor_id) {
  return Mix64(Mix64(seed) ^ (static_cast<uint64_t>(tensor_id) * 0xd6e8feb86659fd93ULL));
}

// Uniform in [-bound, bound) from the top 24 bits (a float mantissa holds exactly 24).
inline float UniformValue(uint64_t key, int64_t index, float bound) {
  const uint64_t h = Mix64(key ^ Mix64(static_cast<uint64_t>(index)));
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return bound * (2.0f * u - 1.0f);
}

float Bound(const ParamSpec& spec) {
  switch (spec.init) {
    case InitKind::kZeros:
      return 0.0f;
    case InitKind::kHeUniform:
      CHECK_GT(spec.fan_in, 0) << "He init of '" << spec.name << "' needs fan_in > 0";
      return static_cast<float>(std::sqrt(6.0 / static_cast<double>(spec.fan_in)));
    case InitKind::kGlorotUniform:
      CHECK_GT(spec.fan_in + spec.fan_out, 0) << "Glorot init of '" << spec.name << "' needs fan_in + fan_out > 0";
      return static_cast<float>(std::sqrt(6.0 / static_cast<double>(spec.fan_in + spec.fan_out)));
  }
  LOG(FATAL) << "unknown InitKind " << static_cast<int>(spec.init);
  return 0.0f;
}

}  // namespace

float InitialValue(uint64_t seed, int tensor_id, int64_t index, const ParamSpec& spec) {
  if (spec.init == InitKind::kZeros) return 0.0f;
  return UniformValue(TensorKey(seed, tensor_id), index, Bound(spec));
}

void FillInitialValues(uint64_t seed, int tensor_id, const ParamSpec& spec, int64_t offset, int64_t length,
                       float* out) {
  CHECK_GE(offset, 0);
  CHECK_GE(length, 0);
  CHECK_LE(offset + length, spec.num_elements)
      << "init of '" << spec.name << "': range [" << offset << ", " << offset + length << ") outside the tensor of "
      << spec.num_elements << " elements";
  if (spec.init == InitKind::kZeros) {
    for (int64_t i = 0; i < length; ++i) out[i] = 0.0f;
    return;
  }
  const uint64_t key = TensorKey(seed, tensor_id);
  const float bound = Bound(spec);
  for (int64_t i = 0; i < length; ++i) out[i] = UniformValue(key, offset + i, bound);
}

}  // namespace model
}  // namespace pstrain
