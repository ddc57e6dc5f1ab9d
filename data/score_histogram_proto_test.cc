#include "data/score_histogram_proto.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace pstrain {
namespace data {
namespace {

ScoreHistogram Sample() {
  ScoreHistogram h;
  for (double p : {0.02, 0.02, 0.3, 0.31, 0.7}) EXPECT_TRUE(h.Add(p, false).ok());
  for (double p : {0.3, 0.6, 0.9}) EXPECT_TRUE(h.Add(p, true).ok());
  return h;
}

TEST(ScoreHistogramProtoTest, HoldsTheLayoutAndOnlyTheNonEmptyBinsAscending) {
  const pstrain::ScoreHistogram message = ScoreHistogramToProto(Sample());
  EXPECT_EQ(message.num_bins(), 65536u);
  EXPECT_EQ(message.max_logit(), 12.0);
  ASSERT_EQ(message.bins_size(), 6);  // 0.02 twice, 0.3 for both labels: 6 bins for 8 predictions
  ASSERT_EQ(message.positives_size(), 6);
  ASSERT_EQ(message.negatives_size(), 6);
  for (int i = 1; i < message.bins_size(); ++i) EXPECT_LT(message.bins(i - 1), message.bins(i));
  EXPECT_EQ(message.bins(0), static_cast<uint32_t>(ScoreHistogram::BinOf(0.02)));
  EXPECT_EQ(message.negatives(0), 2u);
  EXPECT_EQ(message.positives(0), 0u);
  // Far below the 1 MiB of the dense counts.
  EXPECT_LT(message.ByteSizeLong(), 64u);
  EXPECT_EQ(*CheckScoreHistogramProto(message), 8);
}

TEST(ScoreHistogramProtoTest, MergesBackToTheSameAuc) {
  const ScoreHistogram original = Sample();
  ScoreHistogram received;
  ASSERT_TRUE(MergeScoreHistogramProto(ScoreHistogramToProto(original), &received).ok());
  ASSERT_TRUE(MergeScoreHistogramProto(ScoreHistogramToProto(original), &received).ok());
  EXPECT_EQ(received.positives(), 6);
  EXPECT_EQ(received.negatives(), 10);
  EXPECT_EQ(*received.Auc(), *original.Auc());
  EXPECT_EQ(*received.ErrorBound(), *original.ErrorBound());
}

TEST(ScoreHistogramProtoTest, BadMessagesAreRefusedAndAddNothing) {
  ScoreHistogram into = Sample();
  pstrain::ScoreHistogram message = ScoreHistogramToProto(Sample());

  pstrain::ScoreHistogram other_layout = message;
  other_layout.set_num_bins(1024);
  absl::Status s = MergeScoreHistogramProto(other_layout, &into);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "score histogram: layout of 1024 bins over logits [-12, 12], expected 65536 bins over [-12, 12]");
  EXPECT_EQ(CheckScoreHistogramProto(other_layout).status(), s);

  pstrain::ScoreHistogram out_of_range = message;
  out_of_range.set_bins(5, 70000);
  s = MergeScoreHistogramProto(out_of_range, &into);
  EXPECT_EQ(s.message(), "score histogram: entry 5 is bin 70000, expected a bin below 65536");

  pstrain::ScoreHistogram short_list = message;
  short_list.mutable_negatives()->RemoveLast();
  s = MergeScoreHistogramProto(short_list, &into);
  EXPECT_EQ(s.message(), "score histogram: 6 bins, 6 positive counts and 5 negative counts, expected as many of each");
  EXPECT_EQ(CheckScoreHistogramProto(short_list).status(), s);

  EXPECT_EQ(into.count(), 8);
  EXPECT_EQ(*into.Auc(), *Sample().Auc());
}

}  // namespace
}  // namespace data
}  // namespace pstrain
