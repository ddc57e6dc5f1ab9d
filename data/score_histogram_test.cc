#include "data/score_histogram.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "data/auc.h"
#include "data/zipf.h"

namespace pstrain {
namespace data {
namespace {

constexpr int kBins = ScoreHistogram::kNumBins;
constexpr double kWidth = 2 * ScoreHistogram::kMaxLogit / kBins;

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// Predictions with their labels, kept both ways: as a histogram and as the raw lists ExactAuc takes.
struct Predictions {
  ScoreHistogram histogram;
  std::vector<double> scores;
  std::vector<uint8_t> labels;

  void Add(double p, bool positive) {
    ASSERT_TRUE(histogram.Add(p, positive).ok());
    scores.push_back(p);
    labels.push_back(positive ? 1 : 0);
  }
  double Exact() const {
    const absl::StatusOr<double> auc = ExactAuc(scores, labels);
    EXPECT_TRUE(auc.ok()) << auc.status();
    return auc.value_or(-1);
  }
};

double Auc(const ScoreHistogram& h) {
  const absl::StatusOr<double> auc = h.Auc();
  EXPECT_TRUE(auc.ok()) << auc.status();
  return auc.value_or(-1);
}

double Bound(const ScoreHistogram& h) {
  const absl::StatusOr<double> bound = h.ErrorBound();
  EXPECT_TRUE(bound.ok()) << bound.status();
  return bound.value_or(-1);
}

// The bound holds, with room only for the rounding of two sums of doubles.
void ExpectWithinBound(const Predictions& p) {
  const double exact = p.Exact();
  const double auc = Auc(p.histogram);
  EXPECT_LE(std::abs(auc - exact), Bound(p.histogram) + 1e-12) << "histogram " << auc << ", exact " << exact;
}

using Bins = std::vector<std::tuple<uint32_t, int64_t, int64_t>>;

Bins NonEmpty(const ScoreHistogram& h) {
  Bins bins;
  h.ForEachNonEmpty([&](uint32_t b, int64_t pos, int64_t neg) { bins.emplace_back(b, pos, neg); });
  return bins;
}

TEST(ScoreHistogramTest, BinsAreEqualWidthOnTheLogitScaleAndTheEndsTakeTheTails) {
  for (int b : {1, 100, kBins / 4, kBins / 2 - 1, kBins / 2, kBins - 2}) {
    const double middle = -ScoreHistogram::kMaxLogit + (b + 0.5) * kWidth;
    EXPECT_EQ(ScoreHistogram::BinOf(Sigmoid(middle)), b) << "logit " << middle;
  }
  EXPECT_EQ(ScoreHistogram::BinOf(0.5), kBins / 2);
  EXPECT_EQ(ScoreHistogram::BinOf(0), 0);
  EXPECT_EQ(ScoreHistogram::BinOf(1e-9), 0);
  EXPECT_EQ(ScoreHistogram::BinOf(-2), 0);
  EXPECT_EQ(ScoreHistogram::BinOf(1), kBins - 1);
  EXPECT_EQ(ScoreHistogram::BinOf(1 - 1e-9), kBins - 1);
  EXPECT_EQ(ScoreHistogram::BinOf(std::numeric_limits<double>::infinity()), kBins - 1);
}

TEST(ScoreHistogramTest, BinOfIsMonotoneAndEachLowerEdgeStartsItsBin) {
  for (int b = 1; b < kBins; ++b) {
    const double edge = ScoreHistogram::LowerEdge(b);
    ASSERT_EQ(ScoreHistogram::BinOf(edge), b);
    ASSERT_EQ(ScoreHistogram::BinOf(std::nextafter(edge, 0.0)), b - 1);
  }
  // Consecutive doubles through the crowded middle and near both ends never step back.
  for (double start : {1e-6, 0.01, 0.4999, 0.999999}) {
    double p = start;
    int last = ScoreHistogram::BinOf(p);
    for (int i = 0; i < 200000; ++i) {
      p = std::nextafter(p, 1.0);
      const int bin = ScoreHistogram::BinOf(p);
      ASSERT_GE(bin, last) << "probability " << p;
      last = bin;
    }
  }
}

TEST(ScoreHistogramTest, OnePredictionPerBinGivesTheExactAucAndABoundOfZero) {
  Predictions p;
  const double probabilities[] = {0.001, 0.02, 0.1, 0.3, 0.35, 0.5, 0.8, 0.999};
  const bool positive[] = {false, true, false, false, true, true, false, true};
  for (int i = 0; i < 8; ++i) p.Add(probabilities[i], positive[i]);
  EXPECT_NEAR(Auc(p.histogram), p.Exact(), 1e-15);
  EXPECT_DOUBLE_EQ(Auc(p.histogram), 0.6875);  // 11 of the 16 pairs won
  EXPECT_EQ(Bound(p.histogram), 0);
}

TEST(ScoreHistogramTest, TiesWithinABinCountHalfAndTheWorstCaseReachesTheBound) {
  // Adversarial: every prediction in one bin, each positive above each negative. Exact AUC 1; the
  // histogram sees only ties.
  Predictions p;
  const double low = ScoreHistogram::LowerEdge(40000);
  const double high = ScoreHistogram::LowerEdge(40001);
  for (int i = 0; i < 50; ++i) {
    p.Add(low + (high - low) * (0.01 + 0.004 * i), false);
    p.Add(low + (high - low) * (0.8 + 0.003 * i), true);
  }
  EXPECT_EQ(p.Exact(), 1.0);
  EXPECT_DOUBLE_EQ(Auc(p.histogram), 0.5);
  EXPECT_DOUBLE_EQ(Bound(p.histogram), 0.5);
  ExpectWithinBound(p);
}

TEST(ScoreHistogramTest, ClampedTailsAreTiesWithinTheBound) {
  // Below sigmoid(-12) and above sigmoid(12) everything shares the end bins, ordered adversarially.
  Predictions p;
  for (int i = 0; i < 30; ++i) {
    p.Add(1e-12 * (i + 1), false);
    p.Add(1e-7 * (i + 1), true);
    p.Add(1 - 1e-7 * (i + 1), false);
    p.Add(1 - 1e-12 * (i + 1), true);
  }
  EXPECT_GT(Bound(p.histogram), 0.2);
  ExpectWithinBound(p);
}

TEST(ScoreHistogramTest, RandomPredictionsWithManyTiesStayWithinTheBound) {
  SplitMix64 rng(11);
  for (int round = 0; round < 20; ++round) {
    Predictions p;
    const int n = 50 + round * 97;
    // A few distinct values within a handful of neighbouring bins, so that most pairs tie.
    const int first_bin = 1000 + round * 3000;
    for (int i = 0; i < n; ++i) {
      const int bin = first_bin + static_cast<int>(rng.Uniform() * 4);
      const double low = ScoreHistogram::LowerEdge(bin), high = ScoreHistogram::LowerEdge(bin + 1);
      const double prob = low + (high - low) * std::floor(rng.Uniform() * 5) / 5;
      p.Add(prob, rng.Uniform() < 0.3 + 0.1 * (prob > low));
    }
    p.Add(0.01, true);  // at least one of each label
    p.Add(0.99, false);
    ExpectWithinBound(p);
  }
}

// Calibrated predictions: logits ~ N(mean, spread), labels ~ Bernoulli(sigmoid(logit)).
Predictions Realistic(double mean, double spread, int n, uint64_t seed) {
  SplitMix64 rng(seed);
  Predictions p;
  for (int i = 0; i < n; i += 2) {
    // Box-Muller: two normals from two uniforms.
    const double r = std::sqrt(-2 * std::log(1 - rng.Uniform())), angle = 2 * M_PI * rng.Uniform();
    for (double z : {r * std::cos(angle), r * std::sin(angle)}) {
      const double prob = Sigmoid(mean + spread * z);
      p.Add(static_cast<float>(prob), rng.Uniform() < prob);  // models predict floats
    }
  }
  return p;
}

TEST(ScoreHistogramTest, RealisticSpreadsOf200kPredictionsHaveABoundBelow1e4) {
  uint64_t seed = 1;
  for (double mean : {-4.0, -1.5, 0.0}) {
    for (double spread : {0.75, 1.5, 3.0}) {
      const Predictions p = Realistic(mean, spread, 200000, seed++);
      const double bound = Bound(p.histogram);
      EXPECT_LT(bound, 1e-4) << "logit mean " << mean << ", spread " << spread;
      EXPECT_GT(bound, 0) << "logit mean " << mean << ", spread " << spread;
      ExpectWithinBound(p);
    }
  }
}

TEST(ScoreHistogramTest, MergingPartsEqualsCountingEverythingInOne) {
  const Predictions whole = Realistic(-2, 1.5, 30000, 5);
  ScoreHistogram parts[3];
  for (size_t i = 0; i < whole.scores.size(); ++i) {
    ASSERT_TRUE(parts[i % 3].Add(whole.scores[i], whole.labels[i] == 1).ok());
  }
  ScoreHistogram merged;
  for (const ScoreHistogram& part : parts) merged.Merge(part);
  EXPECT_EQ(merged.positives(), whole.histogram.positives());
  EXPECT_EQ(merged.negatives(), whole.histogram.negatives());
  EXPECT_EQ(merged.count(), 30000);
  EXPECT_EQ(NonEmpty(merged), NonEmpty(whole.histogram));
  EXPECT_EQ(Auc(merged), Auc(whole.histogram));
}

TEST(ScoreHistogramTest, AucIsUndefinedWithOneLabelOnly) {
  ScoreHistogram h;
  EXPECT_EQ(h.Auc().status().message(), "AUC: 0 positives and 0 negatives, expected at least one of each");
  ASSERT_TRUE(h.Add(0.3, true).ok());
  ASSERT_TRUE(h.Add(0.7, true).ok());
  EXPECT_EQ(h.Auc().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.ErrorBound().status().message(),
            "AUC error bound: 2 positives and 0 negatives, expected at least one of each");
}

TEST(ScoreHistogramTest, NaNIsRefusedAndCountsNothing) {
  ScoreHistogram h;
  const absl::Status s = h.Add(std::nan(""), true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "score histogram: predicted probability NaN, expected a number");
  EXPECT_EQ(h.count(), 0);
}

TEST(ScoreHistogramTest, CompactFormHoldsOnlyNonEmptyBinsAndAddsBack) {
  ScoreHistogram h;
  ASSERT_TRUE(h.Add(0.25, true).ok());
  ASSERT_TRUE(h.Add(0.25, false).ok());
  ASSERT_TRUE(h.Add(0.9, false).ok());
  ASSERT_TRUE(h.Add(0.01, true).ok());
  const Bins bins = NonEmpty(h);
  ASSERT_EQ(bins.size(), 3u);
  std::vector<uint32_t> index;
  std::vector<uint64_t> pos, neg;
  for (const auto& [b, p, n] : bins) {
    index.push_back(b);
    pos.push_back(static_cast<uint64_t>(p));
    neg.push_back(static_cast<uint64_t>(n));
  }
  EXPECT_EQ(index[0], static_cast<uint32_t>(ScoreHistogram::BinOf(0.01)));
  EXPECT_EQ(*ScoreHistogram::CheckBins(index, pos, neg), 4);
  ScoreHistogram copy;
  ASSERT_TRUE(copy.AddBins(index, pos, neg).ok());
  EXPECT_EQ(NonEmpty(copy), bins);
  EXPECT_EQ(Auc(copy), Auc(h));
}

TEST(ScoreHistogramTest, BadCompactFormsAreRefusedAndAddNothing) {
  ScoreHistogram h;
  ASSERT_TRUE(h.Add(0.5, true).ok());
  const std::vector<uint32_t> two_bins = {3, 7};
  const std::vector<uint64_t> one = {1}, two = {1, 2};
  absl::Status s = h.AddBins(two_bins, one, two);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "score histogram: 2 bins, 1 positive counts and 2 negative counts, expected as many of each");
  const std::vector<uint32_t> out_of_range = {3, 65536};
  s = h.AddBins(out_of_range, two, two);
  EXPECT_EQ(s.message(), "score histogram: entry 1 is bin 65536, expected a bin below 65536");
  const std::vector<uint64_t> huge = {1, uint64_t{1} << 63};
  s = h.AddBins(two_bins, two, huge);
  EXPECT_EQ(s.message(),
            "score histogram: entry 1 (bin 7) takes the count past 9223372036854775807, expected a total that "
            "fits an int64");
  EXPECT_EQ(h.count(), 1);
  EXPECT_EQ(NonEmpty(h), (Bins{{static_cast<uint32_t>(kBins / 2), 1, 0}}));
}

}  // namespace
TEST(ScorePredictionsTest, AddsEveryPredictionsLogLossCorrectnessAndBin) {
  ScoreHistogram scores;
  PredictionTotals totals;
  const std::vector<float> p = {0.9f, 0.2f, 0.6f, 0.0f};
  const std::vector<float> labels = {1, 0, 0, 1};
  ASSERT_TRUE(ScorePredictions(p, labels, &scores, &totals).ok());
  EXPECT_EQ(scores.count(), 4);
  EXPECT_EQ(totals.correct, 2);  // 0.9 for a click, 0.2 for none
  const double expected = -std::log(double{0.9f}) - std::log1p(-double{0.2f}) - std::log1p(-double{0.6f}) -
                          std::log(1e-12);  // p = 0 for a click costs log(1e-12), not infinity
  EXPECT_NEAR(totals.log_loss_sum, expected, 1e-9);
  EXPECT_EQ(ScorePredictions(p, std::vector<float>{1}, &scores, &totals).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace data
}  // namespace pstrain
