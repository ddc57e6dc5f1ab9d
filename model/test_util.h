// Helpers shared by the model/ unit tests: moving host vectors in and out of backend memory and
// filling them with reproducible random values.
#ifndef PSTRAIN_MODEL_TEST_UTIL_H_
#define PSTRAIN_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend.h"

namespace pstrain {
namespace model {
namespace testutil {

// A backend buffer holding a copy of `host`.
template <typename T>
BackendBuffer<T> ToBackend(Backend* backend, const std::vector<T>& host) {
  BackendBuffer<T> buffer(backend);
  EXPECT_TRUE(buffer.Reserve(static_cast<int64_t>(host.size())).ok());
  EXPECT_TRUE(backend->Upload(host.data(), host.size() * sizeof(T), buffer.data()).ok());
  return buffer;
}

// The first `count` elements of a backend buffer.
template <typename T>
std::vector<T> ToHost(Backend* backend, const BackendBuffer<T>& buffer, int64_t count) {
  std::vector<T> host(count);
  EXPECT_TRUE(backend->Download(buffer.data(), count * sizeof(T), host.data()).ok());
  return host;
}

inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace testutil
}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_TEST_UTIL_H_
