// Helpers shared by the model/ unit tests: moving host vectors in and out of backend memory,
// filling them with reproducible random values, and checking gradients by finite differences.
#ifndef PSTRAIN_MODEL_TEST_UTIL_H_
#define PSTRAIN_MODEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
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

// A Window2d from its six sizes (see model/backend.h).
inline Window2d MakeWindow(int channels, int height, int width, int kernel, int stride, int padding) {
  Window2d w;
  w.channels = channels;
  w.height = height;
  w.width = width;
  w.kernel = kernel;
  w.stride = stride;
  w.padding = padding;
  return w;
}

inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks analytic[i] against the central difference of loss() in each element of *values, with
// step 1e-2: large enough for float forward passes to resolve, small enough for the smooth and
// piecewise-linear (away from kinks) layers under test.
inline void ExpectMatchesFiniteDifferences(const char* what, std::vector<float>* values,
                                           const std::function<double()>& loss, const std::vector<float>& analytic) {
  constexpr float kEps = 1e-2f;
  ASSERT_EQ(values->size(), analytic.size()) << what;
  for (size_t i = 0; i < values->size(); ++i) {
    const float saved = (*values)[i];
    (*values)[i] = saved + kEps;
    const double plus = loss();
    (*values)[i] = saved - kEps;
    const double minus = loss();
    (*values)[i] = saved;
    const double numeric = (plus - minus) / (2.0 * kEps);
    EXPECT_NEAR(analytic[i], numeric, 1e-3 + 1e-2 * std::fabs(numeric)) << what << " element " << i;
  }
}

// Distinct values at least 0.1 apart in shuffled order: no ties, so no rounding changes an argmax,
// and a finite-difference step of 1e-2 never changes which element of a window is the maximum.
inline std::vector<float> DistinctValues(int64_t count, uint32_t seed) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = 0.1f * static_cast<float>(i - count / 2);
  std::mt19937 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

}  // namespace testutil
}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_TEST_UTIL_H_
