#include "server/float_ops.h"

#include <cmath>
#include <cstring>

namespace pstrain::server {
namespace {

// Tensor bytes are memcpy'd to and from float arrays.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian float32");

constexpr uint32_t kExponentMask = 0x7f800000u;  // all ones: Inf or NaN

uint32_t Bits(const char* bytes, int64_t i) {
  uint32_t bits;
  std::memcpy(&bits, bytes + 4 * i, 4);
  return bits;
}

}  // namespace

int64_t FindNonFinite(const char* bytes, int64_t n) {
  // A branch-free pass first (vectorizes); the exact position is looked for only on failure.
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= static_cast<uint32_t>((Bits(bytes, i) & kExponentMask) == kExponentMask);
  if (any == 0) return -1;
  for (int64_t i = 0; i < n; ++i) {
    if ((Bits(bytes, i) & kExponentMask) == kExponentMask) return i;
  }
  return -1;
}

std::string NonFiniteName(const char* bytes, int64_t index) {
  float v;
  std::memcpy(&v, bytes + 4 * index, 4);
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

void AddScaled(float weight, const float* __restrict x, int64_t n, float* __restrict sum) {
  for (int64_t i = 0; i < n; ++i) sum[i] += weight * x[i];
}

}  // namespace pstrain::server
