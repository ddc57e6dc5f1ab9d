#include "data/auc.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "data/zipf.h"

namespace pstrain {
namespace data {
namespace {

double Auc(const std::vector<double>& scores, const std::vector<uint8_t>& labels) {
  const absl::StatusOr<double> auc = ExactAuc(scores, labels);
  EXPECT_TRUE(auc.ok()) << auc.status();
  return auc.value_or(-1);
}

TEST(ExactAucTest, ScikitLearnExample) { EXPECT_DOUBLE_EQ(Auc({0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}), 0.75); }

TEST(ExactAucTest, PerfectAndReversedRankings) {
  EXPECT_DOUBLE_EQ(Auc({0.1, 0.2, 0.3, 0.4}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.4, 0.3, 0.2, 0.1}, {0, 0, 1, 1}), 0.0);
}

TEST(ExactAucTest, TiesCountHalf) {
  EXPECT_DOUBLE_EQ(Auc({0.5, 0.5, 0.5, 0.5}, {1, 0, 1, 0}), 0.5);
  // Pairs (pos, neg): (0.5, 0.5) half, (0.5, 0.2), (0.9, 0.5), (0.9, 0.2) won: 3.5 / 4.
  EXPECT_DOUBLE_EQ(Auc({0.5, 0.5, 0.2, 0.9}, {1, 0, 0, 1}), 0.875);
}

TEST(ExactAucTest, MatchesPairCountingWithManyTies) {
  SplitMix64 rng(7);
  std::vector<double> scores(600);
  std::vector<uint8_t> labels(600);
  for (size_t i = 0; i < scores.size(); ++i) {
    scores[i] = std::floor(rng.Uniform() * 20);  // Many ties.
    labels[i] = rng.Uniform() < 0.2 + 0.03 * scores[i] ? 1 : 0;
  }
  double won = 0, pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[i] != 1 || labels[j] != 0) continue;
      pairs += 1;
      won += scores[i] > scores[j] ? 1 : scores[i] == scores[j] ? 0.5 : 0;
    }
  }
  EXPECT_NEAR(Auc(scores, labels), won / pairs, 1e-12);
}

TEST(ExactAucTest, RejectsBadInput) {
  EXPECT_EQ(ExactAuc(std::vector<double>{0.1, 0.2}, std::vector<uint8_t>{1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status one_class = ExactAuc(std::vector<double>{0.1, 0.2}, std::vector<uint8_t>{1, 1}).status();
  EXPECT_EQ(one_class.message(), "AUC: 2 positives and 0 negatives, expected at least one of each");
  EXPECT_EQ(ExactAuc(std::vector<double>{0.1, 0.2}, std::vector<uint8_t>{1, 2}).status().message(),
            "AUC: label 2 at index 1, expected 0 or 1");
  EXPECT_EQ(ExactAuc(std::vector<double>{NAN, 0.2}, std::vector<uint8_t>{1, 0}).status().message(),
            "AUC: score NaN at index 0, expected a number");
}

}  // namespace
}  // namespace data
}  // namespace pstrain
