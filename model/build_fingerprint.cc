#include "model/build_fingerprint.h"

#include <cstring>
#include <vector>

#include "common/key_hash.h"
#include "model/init.h"
#include "model/param_spec.h"

namespace pstrain::model {
namespace {

class Fnv1a {
 public:
  void Add(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (v >> (8 * i)) & 0xff;
      hash_ *= 1099511628211ull;
    }
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 1469598103934665603ull;
};

uint64_t Compute() {
  Fnv1a h;
  for (int servers = 1; servers <= 16; ++servers) {
    for (uint64_t k = 0; k < 64; ++k) h.Add(static_cast<uint64_t>(ServerOfKey(k * 0x9e3779b97f4a7c15ull, servers)));
  }
  for (InitKind kind : {InitKind::kZeros, InitKind::kHeUniform, InitKind::kGlorotUniform}) {
    ParamSpec spec;
    spec.name = "probe";
    spec.shape = {8, 8};
    spec.num_elements = 64;
    spec.init = kind;
    spec.fan_in = 8;
    spec.fan_out = 8;
    std::vector<float> values(64);
    FillInitialValues(7, 3, spec, 0, 64, values.data());
    for (float v : values) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof(bits));
      h.Add(bits);
    }
  }
  return h.hash() == 0 ? 1 : h.hash();
}

}  // namespace

uint64_t BuildFingerprint() {
  static const uint64_t fingerprint = Compute();
  return fingerprint;
}

}  // namespace pstrain::model
