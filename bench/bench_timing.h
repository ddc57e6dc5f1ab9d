// Timing helpers shared by the plain-executable benchmarks: the wall time of one call and the
// median of a round's samples. Header-only.
#ifndef PSTRAIN_BENCH_BENCH_TIMING_H_
#define PSTRAIN_BENCH_BENCH_TIMING_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace pstrain::bench {

// Seconds `f` took (steady clock).
inline double Seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The median of `v` (the upper one of an even count). REQUIRES: !v.empty().
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace pstrain::bench

#endif  // PSTRAIN_BENCH_BENCH_TIMING_H_
