#include "model/key_index.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace model {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<uint64_t> ToVector(absl::Span<const uint64_t> s) { return {s.begin(), s.end()}; }
std::vector<int32_t> ToVector(absl::Span<const int32_t> s) { return {s.begin(), s.end()}; }

TEST(KeyIndexTest, SortsDistinctKeysAndIndexesEveryOccurrence) {
  KeyIndex index;
  EXPECT_EQ(index.Add({7, 3, 7, 9}), 0);
  ASSERT_TRUE(index.Build().ok());
  EXPECT_THAT(ToVector(index.unique_keys()), ElementsAre(3, 7, 9));
  EXPECT_THAT(ToVector(index.indices(0)), ElementsAre(1, 0, 1, 2));
}

TEST(KeyIndexTest, SeveralBagsShareOneList) {
  KeyIndex index;
  EXPECT_EQ(index.Add({7, 3, 7}), 0);
  EXPECT_EQ(index.Add({}), 1);
  EXPECT_EQ(index.Add({9, 3}), 2);
  ASSERT_TRUE(index.Build().ok());
  EXPECT_EQ(index.num_parts(), 3);
  EXPECT_EQ(index.num_occurrences(), 5);
  EXPECT_THAT(ToVector(index.unique_keys()), ElementsAre(3, 7, 9));
  EXPECT_THAT(ToVector(index.indices(0)), ElementsAre(1, 0, 1));
  EXPECT_THAT(ToVector(index.indices(1)), IsEmpty());
  EXPECT_THAT(ToVector(index.indices(2)), ElementsAre(2, 0));
}

TEST(KeyIndexTest, OrdersKeysAsUnsigned64BitValues) {
  // Keys are hashes: the top bit is as likely as any other, and must not make a key "negative".
  const uint64_t big = uint64_t{1} << 63;
  KeyIndex index;
  index.Add({big + 1, 5, ~uint64_t{0}, 0, big});
  ASSERT_TRUE(index.Build().ok());
  EXPECT_THAT(ToVector(index.unique_keys()), ElementsAre(0, 5, big, big + 1, ~uint64_t{0}));
  EXPECT_THAT(ToVector(index.indices(0)), ElementsAre(3, 1, 4, 0, 2));
}

TEST(KeyIndexTest, ClearStartsANewBatch) {
  KeyIndex index;
  index.Add({1, 2, 3});
  ASSERT_TRUE(index.Build().ok());
  index.Clear();
  EXPECT_EQ(index.num_parts(), 0);
  EXPECT_EQ(index.Add({42, 42}), 0);
  ASSERT_TRUE(index.Build().ok());
  EXPECT_THAT(ToVector(index.unique_keys()), ElementsAre(42));
  EXPECT_THAT(ToVector(index.indices(0)), ElementsAre(0, 0));
}

TEST(KeyIndexTest, EmptyIndexHasNoKeys) {
  KeyIndex index;
  ASSERT_TRUE(index.Build().ok());
  EXPECT_THAT(ToVector(index.unique_keys()), IsEmpty());
  EXPECT_EQ(index.num_parts(), 0);
}

// Against a plain reference on a batch shaped like Criteo's (skewed keys, many repeats), split
// into several parts.
TEST(KeyIndexTest, MatchesReferenceOnRandomBags) {
  std::mt19937_64 rng(7);
  std::geometric_distribution<uint64_t> skewed(0.01);
  std::vector<std::vector<uint64_t>> parts(4);
  std::vector<uint64_t> all;
  for (auto& part : parts) {
    part.resize(1000 + rng() % 1000);
    // Multiplying by an odd constant scatters small ranks over the whole 64-bit range.
    for (uint64_t& key : part) key = skewed(rng) * 0x9e3779b97f4a7c15ULL;
    all.insert(all.end(), part.begin(), part.end());
  }
  KeyIndex index;
  for (const auto& part : parts) index.Add(part);
  ASSERT_TRUE(index.Build().ok());

  std::vector<uint64_t> want = all;
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  ASSERT_EQ(ToVector(index.unique_keys()), want);
  for (size_t p = 0; p < parts.size(); ++p) {
    const absl::Span<const int32_t> indices = index.indices(static_cast<int>(p));
    ASSERT_EQ(indices.size(), parts[p].size());
    for (size_t j = 0; j < parts[p].size(); ++j) {
      ASSERT_EQ(want[indices[j]], parts[p][j]) << "part " << p << " occurrence " << j;
    }
  }
}

}  // namespace
}  // namespace model
}  // namespace pstrain
