#include "data/zipf.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace pstrain {
namespace data {
namespace {

// P(k) = k^-s / sum_{j<=n} j^-s.
std::vector<double> ZipfProbabilities(uint64_t n, double s) {
  std::vector<double> p(n + 1, 0);
  double total = 0;
  for (uint64_t k = 1; k <= n; ++k) total += p[k] = std::pow(static_cast<double>(k), -s);
  for (double& x : p) x /= total;
  return p;
}

// Draws 1e5 ranks and checks the frequency of ranks 1..5 against theory within 4.5 binomial
// standard deviations (a false failure about once in 10^5 runs; the seed is fixed anyway).
void ExpectFrequenciesMatch(uint64_t n, double s) {
  ZipfSampler sampler(n, s);
  SplitMix64 rng(12345);
  constexpr int kDraws = 100000;
  std::vector<int64_t> counts(6, 0);
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t k = sampler.Sample(rng);
    ASSERT_GE(k, 1u);
    ASSERT_LE(k, n);
    if (k <= 5) ++counts[k];
  }
  const std::vector<double> p = ZipfProbabilities(n, s);
  for (int k = 1; k <= 5 && static_cast<uint64_t>(k) <= n; ++k) {
    const double expected = kDraws * p[k];
    const double sd = std::sqrt(kDraws * p[k] * (1 - p[k]));
    EXPECT_NEAR(static_cast<double>(counts[k]), expected, 4.5 * sd + 1) << "rank " << k << " n " << n << " s " << s;
  }
}

TEST(ZipfSamplerTest, RankFrequenciesMatchTheory) {
  ExpectFrequenciesMatch(1000, 1.1);
  ExpectFrequenciesMatch(100000, 1.1);
  ExpectFrequenciesMatch(1000, 1.0);  // The log branch of H.
  ExpectFrequenciesMatch(50, 0.5);
  ExpectFrequenciesMatch(3, 2.0);
}

TEST(ZipfSamplerTest, OneRankAlwaysDrawsIt) {
  ZipfSampler sampler(1, 1.1);
  SplitMix64 rng(1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sampler.Sample(rng), 1u);
}

TEST(ZipfSamplerTest, HugeRangesNeedNoTable) {
  ZipfSampler sampler(uint64_t{1} << 40, 1.1);
  SplitMix64 rng(3);
  uint64_t max_seen = 0;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t k = sampler.Sample(rng);
    ASSERT_GE(k, 1u);
    ASSERT_LE(k, uint64_t{1} << 40);
    max_seen = std::max(max_seen, k);
  }
  EXPECT_GT(max_seen, uint64_t{1} << 20);  // The tail is reached.
}

TEST(ZipfSamplerTest, SameSeedSameDraws) {
  ZipfSampler sampler(1000000, 1.1);
  SplitMix64 a(9), b(9);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(sampler.Sample(a), sampler.Sample(b));
}

}  // namespace
}  // namespace data
}  // namespace pstrain
