#include "model/mlp.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/cpu_backend.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using ::testing::HasSubstr;
using testutil::RandomVector;

class MlpTest : public ::testing::Test {
 protected:
  std::unique_ptr<Mlp> MakeMlp(const std::vector<int>& sizes) {
    absl::StatusOr<std::unique_ptr<Mlp>> mlp = Mlp::Create(sizes, backend_.get());
    EXPECT_TRUE(mlp.ok()) << mlp.status();
    return mlp.ok() ? std::move(*mlp) : nullptr;
  }

  std::vector<int32_t> Labels(int n, int classes) {
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = (i * 7 + 3) % classes;
    return labels;
  }

  std::unique_ptr<Backend> backend_ = NewCpuBackend();
};

TEST_F(MlpTest, CreateRefusesBadLayerSizes) {
  EXPECT_EQ(Mlp::Create({5}, backend_.get()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Mlp::Create({5, 0, 3}, backend_.get()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Mlp::Create({5, -2}, backend_.get()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Mlp::Create({5, 1}, backend_.get()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MlpTest, ReportsLayoutAndSizes) {
  std::unique_ptr<Mlp> mlp = MakeMlp({784, 256, 128, 10});
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->input_size(), 784);
  EXPECT_EQ(mlp->num_classes(), 10);
  EXPECT_EQ(mlp->num_parameters(), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  ASSERT_EQ(mlp->params().size(), 6u);
  EXPECT_EQ(mlp->params()[5].name, "fc3.bias");
}

TEST_F(MlpTest, SetParametersRefusesWrongSize) {
  std::unique_ptr<Mlp> mlp = MakeMlp({5, 7, 4, 3});
  std::vector<float> flat(mlp->num_parameters() - 1);
  const absl::Status status = mlp->SetParameters(flat);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(std::to_string(mlp->num_parameters())));
}

TEST_F(MlpTest, ParametersRoundTrip) {
  std::unique_ptr<Mlp> mlp = MakeMlp({5, 7, 3});
  const std::vector<float> flat = RandomVector(mlp->num_parameters(), 5);
  ASSERT_TRUE(mlp->SetParameters(flat).ok());
  std::vector<float> back(mlp->num_parameters());
  ASSERT_TRUE(mlp->GetParameters(absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, flat);
}

TEST_F(MlpTest, GradientMatchesFiniteDifferencesForEveryTensor) {
  const int n = 6;
  std::unique_ptr<Mlp> mlp = MakeMlp({5, 7, 4, 3});
  ASSERT_NE(mlp, nullptr);
  std::vector<float> flat(mlp->num_parameters());
  ASSERT_TRUE(mlp->InitializeParameters(42).ok());
  ASSERT_TRUE(mlp->GetParameters(absl::MakeSpan(flat)).ok());
  // Non-zero biases so their gradients pass through a non-trivial path.
  for (const ParamSpec& p : mlp->params()) {
    if (p.init != InitKind::kZeros) continue;
    const std::vector<float> b = RandomVector(p.num_elements, 99, -0.2f, 0.2f);
    std::copy(b.begin(), b.end(), flat.begin() + p.flat_offset);
  }
  ASSERT_TRUE(mlp->SetParameters(flat).ok());
  const std::vector<float> x = RandomVector(n * 5, 7);
  const std::vector<int32_t> labels = Labels(n, 3);

  std::vector<float> grad(mlp->num_parameters());
  BatchStats stats;
  ASSERT_TRUE(mlp->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(grad), &stats).ok());
  EXPECT_EQ(stats.samples, n);

  auto mean_loss = [&]() {
    EXPECT_TRUE(mlp->SetParameters(flat).ok());
    BatchStats s;
    EXPECT_TRUE(mlp->Evaluate(x.data(), labels.data(), n, &s).ok());
    return s.loss_sum / n;
  };
  EXPECT_NEAR(mean_loss(), stats.loss_sum / n, 1e-6);

  const float eps = 1e-2f;
  for (const ParamSpec& p : mlp->params()) {
    for (int64_t i = 0; i < p.num_elements; ++i) {
      float& w = flat[p.flat_offset + i];
      const float saved = w;
      w = saved + eps;
      const double plus = mean_loss();
      w = saved - eps;
      const double minus = mean_loss();
      w = saved;
      const double numeric = (plus - minus) / (2.0 * eps);
      EXPECT_NEAR(grad[p.flat_offset + i], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << p.name << " element " << i;
    }
  }
}

TEST_F(MlpTest, EmptyBatchGivesZeroGradientAndLeavesStats) {
  std::unique_ptr<Mlp> mlp = MakeMlp({5, 7, 3});
  ASSERT_TRUE(mlp->InitializeParameters(1).ok());
  std::vector<float> grad(mlp->num_parameters(), 3.0f);
  BatchStats stats;
  stats.loss_sum = 1.5;
  stats.samples = 2;
  ASSERT_TRUE(mlp->ComputeGradient(nullptr, nullptr, 0, absl::MakeSpan(grad), &stats).ok());
  for (float g : grad) ASSERT_EQ(g, 0.0f);
  EXPECT_EQ(stats.loss_sum, 1.5);
  EXPECT_EQ(stats.samples, 2);
  EXPECT_EQ(stats.correct, 0);
}

TEST_F(MlpTest, GradientOfDoubleBatchIsAverageOfHalves) {
  const int n = 8;
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 9, 4});
  ASSERT_TRUE(mlp->InitializeParameters(3).ok());
  const std::vector<float> x = RandomVector(2 * n * 6, 17);
  const std::vector<int32_t> labels = Labels(2 * n, 4);
  const int64_t p = mlp->num_parameters();
  std::vector<float> all(p), first(p), second(p);
  BatchStats s_all, s_halves;
  ASSERT_TRUE(mlp->ComputeGradient(x.data(), labels.data(), 2 * n, absl::MakeSpan(all), &s_all).ok());
  ASSERT_TRUE(mlp->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(first), &s_halves).ok());
  ASSERT_TRUE(mlp->ComputeGradient(x.data() + n * 6, labels.data() + n, n, absl::MakeSpan(second), &s_halves).ok());
  double max_abs = 0;
  for (int64_t i = 0; i < p; ++i) {
    EXPECT_NEAR(all[i], 0.5f * (first[i] + second[i]), 1e-6) << "parameter " << i;
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(all[i])));
  }
  EXPECT_GT(max_abs, 1e-3);  // the comparison is not between two zero vectors
  EXPECT_NEAR(s_all.loss_sum, s_halves.loss_sum, 1e-5);
  EXPECT_EQ(s_all.correct, s_halves.correct);
  EXPECT_EQ(s_all.samples, 2 * n);
  EXPECT_EQ(s_halves.samples, 2 * n);
}

TEST_F(MlpTest, BadLabelIsRefusedWithSampleAndLabel) {
  std::unique_ptr<Mlp> mlp = MakeMlp({4, 3});
  const std::vector<float> x = RandomVector(3 * 4, 1);
  std::vector<float> grad(mlp->num_parameters());
  BatchStats stats;
  const std::vector<int32_t> labels = {0, 2, 3};
  absl::Status status = mlp->ComputeGradient(x.data(), labels.data(), 3, absl::MakeSpan(grad), &stats);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sample 2"));
  EXPECT_THAT(status.message(), HasSubstr("label 3"));
  EXPECT_EQ(stats.samples, 0);

  const std::vector<int32_t> negative = {0, -1, 1};
  status = mlp->Evaluate(x.data(), negative.data(), 3, &stats);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sample 1"));
  EXPECT_EQ(stats.samples, 0);
}

TEST_F(MlpTest, GradientBufferOfWrongSizeIsRefused) {
  std::unique_ptr<Mlp> mlp = MakeMlp({4, 3});
  const std::vector<float> x = RandomVector(4, 1);
  const std::vector<int32_t> labels = {1};
  std::vector<float> grad(mlp->num_parameters() + 1);
  EXPECT_EQ(mlp->ComputeGradient(x.data(), labels.data(), 1, absl::MakeSpan(grad), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(MlpTest, EvaluateInBatchesEqualsOneBigForward) {
  // More rows than one evaluation batch, so the batching is exercised.
  const int n = Mlp::kEvalBatch + 300;
  std::unique_ptr<Mlp> mlp = MakeMlp({8, 16, 5});
  ASSERT_TRUE(mlp->InitializeParameters(8).ok());
  const std::vector<float> x = RandomVector(static_cast<int64_t>(n) * 8, 2);
  const std::vector<int32_t> labels = Labels(n, 5);
  BatchStats eval;
  ASSERT_TRUE(mlp->Evaluate(x.data(), labels.data(), n, &eval).ok());
  BatchStats grad_stats;
  std::vector<float> grad(mlp->num_parameters());
  ASSERT_TRUE(mlp->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(grad), &grad_stats).ok());
  EXPECT_EQ(eval.samples, n);
  EXPECT_EQ(eval.correct, grad_stats.correct);
  EXPECT_NEAR(eval.loss_sum, grad_stats.loss_sum, 1e-6 * grad_stats.loss_sum);
  EXPECT_GT(eval.loss_sum, 0);
}

TEST_F(MlpTest, ZeroWeightsGiveUniformPrediction) {
  // With every weight zero the logits are zero: loss = log(classes) per sample exactly.
  std::unique_ptr<Mlp> mlp = MakeMlp({3, 4, 5});
  const std::vector<float> x = RandomVector(2 * 3, 4);
  const std::vector<int32_t> labels = {1, 4};
  BatchStats stats;
  ASSERT_TRUE(mlp->Evaluate(x.data(), labels.data(), 2, &stats).ok());
  EXPECT_NEAR(stats.loss_sum, 2 * std::log(5.0), 1e-6);
  EXPECT_EQ(stats.samples, 2);
}

}  // namespace
}  // namespace model
}  // namespace pstrain
