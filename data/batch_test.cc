#include "data/batch.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace data {
namespace {

// 5 samples of 2x3; pixel j of sample i is 10 * i + j, label of sample i is 9 - i.
Dataset SmallDataset() {
  Dataset d;
  d.num_samples = 5;
  d.rows = 2;
  d.cols = 3;
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 6; ++j) d.images.push_back(10.0f * i + j);
    d.labels.push_back(9 - i);
  }
  return d;
}

TEST(GatherBatchTest, CopiesSamplesInIndexOrder) {
  const Dataset d = SmallDataset();
  const std::vector<int64_t> indices = {3, 0, 3, 4};
  std::vector<float> x(indices.size() * 6, -1.0f);
  std::vector<int32_t> labels(indices.size(), -1);
  GatherBatch(d, indices, x.data(), labels.data());
  for (size_t i = 0; i < indices.size(); ++i) {
    EXPECT_EQ(labels[i], 9 - indices[i]);
    for (int j = 0; j < 6; ++j) EXPECT_EQ(x[i * 6 + j], 10.0f * indices[i] + j);
  }
}

TEST(GatherBatchTest, NullOutputsAreSkipped) {
  const Dataset d = SmallDataset();
  const std::vector<int64_t> indices = {1, 2};
  std::vector<int32_t> labels(2, -1);
  GatherBatch(d, indices, nullptr, labels.data());
  EXPECT_EQ(labels, (std::vector<int32_t>{8, 7}));
  std::vector<float> x(12, -1.0f);
  GatherBatch(d, indices, x.data(), nullptr);
  EXPECT_EQ(x[0], 10.0f);
  EXPECT_EQ(x[11], 25.0f);
}

TEST(GatherRangeTest, GathersPermutationPositions) {
  const Dataset d = SmallDataset();
  const std::vector<int64_t> perm = {4, 2, 0, 1, 3};
  std::vector<float> x(2 * 6, -1.0f);
  std::vector<int32_t> labels(2, -1);
  GatherRange(d, perm, Range{1, 3}, x.data(), labels.data());  // samples 2 and 0
  EXPECT_EQ(labels, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(x[0], 20.0f);
  EXPECT_EQ(x[5], 25.0f);
  EXPECT_EQ(x[6], 0.0f);
  EXPECT_EQ(x[11], 5.0f);
  // An empty range writes nothing.
  GatherRange(d, perm, Range{5, 5}, nullptr, nullptr);
}

TEST(GatherDeathTest, OutOfRangeIsAProgrammerError) {
  const Dataset d = SmallDataset();
  std::vector<float> x(6);
  std::vector<int32_t> labels(1);
  const std::vector<int64_t> bad = {5};
  EXPECT_DEATH(GatherBatch(d, bad, x.data(), labels.data()), "sample index 5");
  const std::vector<int64_t> perm = {0, 1};
  EXPECT_DEATH(GatherRange(d, perm, Range{1, 3}, x.data(), labels.data()), "range \\[1, 3\\)");
}

}  // namespace
}  // namespace data
}  // namespace pstrain
