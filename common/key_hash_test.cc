#include "common/key_hash.h"

#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace pstrain {
namespace {

constexpr int kKeys = 1000000;

std::vector<uint64_t> SequentialKeys() {
  std::vector<uint64_t> keys(kKeys);
  for (int i = 0; i < kKeys; ++i) keys[i] = static_cast<uint64_t>(i);
  return keys;
}

std::vector<uint64_t> RandomKeys() {
  std::mt19937_64 rng(20261125);
  std::vector<uint64_t> keys(kKeys);
  for (uint64_t& k : keys) k = rng();
  return keys;
}

void ExpectBalanced(const std::vector<uint64_t>& keys, const char* what) {
  for (int n : {2, 3, 4, 7}) {
    std::vector<int64_t> count(n, 0);
    for (uint64_t k : keys) {
      const int s = ServerOfKey(k, n);
      ASSERT_GE(s, 0);
      ASSERT_LT(s, n);
      ++count[s];
    }
    const double mean = static_cast<double>(keys.size()) / n;
    for (int s = 0; s < n; ++s) {
      EXPECT_NEAR(count[s], mean, 0.05 * mean) << what << " keys, " << n << " servers, server " << s;
    }
  }
}

TEST(KeyHashTest, SequentialKeysSpreadWithinFivePercentOfTheMean) { ExpectBalanced(SequentialKeys(), "sequential"); }

TEST(KeyHashTest, RandomKeysSpreadWithinFivePercentOfTheMean) { ExpectBalanced(RandomKeys(), "random"); }

TEST(KeyHashTest, AddingAServerMovesOnlyKeysToItAndAboutOneInNPlusOne) {
  const std::vector<uint64_t> keys = SequentialKeys();
  for (int n : {1, 2, 3, 4, 7}) {
    int64_t moved = 0;
    for (uint64_t k : keys) {
      const int before = ServerOfKey(k, n);
      const int after = ServerOfKey(k, n + 1);
      if (before != after) {
        ++moved;
        ASSERT_EQ(after, n) << "key " << k << " moved from " << before << " to an old server";
      }
    }
    const double expected = static_cast<double>(keys.size()) / (n + 1);
    EXPECT_NEAR(moved, expected, 0.05 * expected) << n << " -> " << n + 1 << " servers";
  }
}

TEST(KeyHashTest, OneServerOwnsEverything) {
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) EXPECT_EQ(ServerOfKey(k, 1), 0);
}

TEST(KeyHashTest, MixIsFixed) {
  // The layout of every job depends on these values: they must never change.
  EXPECT_EQ(MixKey64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(JumpConsistentHash(0, 1000), 0);
}

}  // namespace
}  // namespace pstrain
