// The Cnn's parameter layout, its gradient against central finite differences on a tiny shape,
// its batch errors, and that a few SGD steps learn a small separable problem.
#include "model/cnn.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/cpu_backend.h"
#include "model/init.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using ::testing::HasSubstr;
using testutil::RandomVector;

// 1x8x8 -> conv 2 -> pool 4x4 -> conv 3 -> pool 2x2 -> flatten 12 -> fc 5 -> fc 3.
CnnShape TinyShape() {
  CnnShape s;
  s.input_channels = 1;
  s.input_height = 8;
  s.input_width = 8;
  s.conv1_channels = 2;
  s.conv2_channels = 3;
  s.hidden = 5;
  s.classes = 3;
  return s;
}

class CnnTest : public ::testing::Test {
 protected:
  std::unique_ptr<Cnn> MakeCnn(const CnnShape& shape) {
    absl::StatusOr<std::unique_ptr<Cnn>> cnn = Cnn::Create(shape, backend_.get());
    EXPECT_TRUE(cnn.ok()) << cnn.status();
    return cnn.ok() ? std::move(*cnn) : nullptr;
  }

  std::vector<int32_t> Labels(int n, int classes) {
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = (i * 7 + 3) % classes;
    return labels;
  }

  std::unique_ptr<Backend> backend_ = NewCpuBackend();
};

TEST_F(CnnTest, DefaultLayoutMatchesTheArchitecture) {
  const std::vector<ParamSpec> specs = CnnParamSpecs(CnnShape());
  struct Expected {
    const char* name;
    std::vector<int64_t> shape;
    InitKind init;
    int64_t fan_in, fan_out;
  };
  const int64_t flat = 64 * 7 * 7;
  const std::vector<Expected> expected = {{"conv1.weight", {32, 25}, InitKind::kHeUniform, 25, 32 * 25},
                                          {"conv1.bias", {32}, InitKind::kZeros, 25, 32 * 25},
                                          {"conv2.weight", {64, 32 * 25}, InitKind::kHeUniform, 32 * 25, 64 * 25},
                                          {"conv2.bias", {64}, InitKind::kZeros, 32 * 25, 64 * 25},
                                          {"fc1.weight", {flat, 128}, InitKind::kHeUniform, flat, 128},
                                          {"fc1.bias", {128}, InitKind::kZeros, flat, 128},
                                          {"fc2.weight", {128, 10}, InitKind::kGlorotUniform, 128, 10},
                                          {"fc2.bias", {10}, InitKind::kZeros, 128, 10}};
  ASSERT_EQ(specs.size(), expected.size());
  int64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(specs[i].name, expected[i].name);
    EXPECT_EQ(specs[i].shape, expected[i].shape);
    int64_t elements = 1;
    for (int64_t d : expected[i].shape) elements *= d;
    EXPECT_EQ(specs[i].num_elements, elements);
    EXPECT_EQ(specs[i].flat_offset, offset);
    EXPECT_EQ(specs[i].init, expected[i].init);
    EXPECT_EQ(specs[i].fan_in, expected[i].fan_in);
    EXPECT_EQ(specs[i].fan_out, expected[i].fan_out);
    offset += elements;
  }

  std::unique_ptr<Cnn> cnn = MakeCnn(CnnShape());
  ASSERT_NE(cnn, nullptr);
  EXPECT_EQ(cnn->num_parameters(), offset);
  EXPECT_EQ(cnn->num_parameters(), 32 * 25 + 32 + 64 * 800 + 64 + flat * 128 + 128 + 1290);
  EXPECT_EQ(cnn->input_size(), 784);
  EXPECT_EQ(cnn->num_classes(), 10);
}

TEST_F(CnnTest, OddImageSizesRoundThePoolingDown) {
  CnnShape s = TinyShape();
  s.input_height = 11;  // pools: 11 -> 5 -> 2
  s.input_width = 9;    //        9 -> 4 -> 2
  const std::vector<ParamSpec> specs = CnnParamSpecs(s);
  EXPECT_EQ(specs[4].shape, (std::vector<int64_t>{3 * 2 * 2, 5}));
  std::unique_ptr<Cnn> cnn = MakeCnn(s);
  ASSERT_NE(cnn, nullptr);
  EXPECT_EQ(cnn->input_size(), 99);
}

TEST_F(CnnTest, CreateRefusesBadShapesWithTheReason) {
  auto error = [&](const CnnShape& s) { return Cnn::Create(s, backend_.get()).status(); };
  CnnShape s = TinyShape();
  s.hidden = 0;
  absl::Status status = error(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("hidden is 0, expected > 0"));
  EXPECT_THAT(status.message(), HasSubstr("cnn shape 1x8x8 conv 2,3 hidden 0 classes 3"));

  s = TinyShape();
  s.conv2_channels = -1;
  EXPECT_THAT(error(s).message(), HasSubstr("conv2_channels is -1"));

  s = TinyShape();
  s.classes = 1;
  status = error(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("at least 2 classes, got 1"));

  s = TinyShape();
  s.input_width = 3;
  status = error(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 8x3 is too small"));

  s = CnnShape();
  s.hidden = 1 << 20;  // fc1 weight 3136 x 2^20 floats
  status = error(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fc1 weight has"));
}

TEST_F(CnnTest, ParametersRoundTripAndRefuseWrongSizes) {
  std::unique_ptr<Cnn> cnn = MakeCnn(TinyShape());
  ASSERT_NE(cnn, nullptr);
  const std::vector<float> flat = RandomVector(cnn->num_parameters(), 5);
  ASSERT_TRUE(cnn->SetParameters(flat).ok());
  std::vector<float> back(cnn->num_parameters());
  ASSERT_TRUE(cnn->GetParameters(absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, flat);

  std::vector<float> short_flat(cnn->num_parameters() - 1);
  const absl::Status status = cnn->SetParameters(short_flat);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(std::to_string(cnn->num_parameters())));
  EXPECT_EQ(cnn->GetParameters(absl::MakeSpan(short_flat)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(cnn->GetParameters(absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, flat);  // the refused call changed nothing
}

TEST_F(CnnTest, InitializeParametersUsesTensorIdsOfTheLayout) {
  std::unique_ptr<Cnn> cnn = MakeCnn(TinyShape());
  ASSERT_NE(cnn, nullptr);
  ASSERT_TRUE(cnn->InitializeParameters(7).ok());
  std::vector<float> flat(cnn->num_parameters());
  ASSERT_TRUE(cnn->GetParameters(absl::MakeSpan(flat)).ok());
  for (size_t t = 0; t < cnn->params().size(); ++t) {
    const ParamSpec& p = cnn->params()[t];
    for (int64_t i = 0; i < p.num_elements; ++i) {
      ASSERT_EQ(flat[p.flat_offset + i], InitialValue(7, static_cast<int>(t), i, p)) << p.name << " element " << i;
    }
  }
}

// Central differences of the mean loss in every parameter of every tensor. ReLU and max pooling
// are piecewise linear: a step can cross a kink (a ReLU input changes sign, or a pooling window
// changes its maximum), which spoils the difference. One activation sitting near a kink spoils it
// for every parameter upstream of that activation, e.g. all of conv1. So an element that fails
// with a step of 1e-2 is retried with 1e-3 and then 1e-4 (float forward passes still resolve
// that); every element must match at one of the steps.
TEST_F(CnnTest, GradientMatchesFiniteDifferencesForEveryTensor) {
  const int n = 3;
  std::unique_ptr<Cnn> cnn = MakeCnn(TinyShape());
  ASSERT_NE(cnn, nullptr);
  std::vector<float> flat(cnn->num_parameters());
  ASSERT_TRUE(cnn->InitializeParameters(42).ok());
  ASSERT_TRUE(cnn->GetParameters(absl::MakeSpan(flat)).ok());
  // Non-zero biases so their gradients pass through a non-trivial path.
  for (const ParamSpec& p : cnn->params()) {
    if (p.init != InitKind::kZeros) continue;
    const std::vector<float> b = RandomVector(p.num_elements, 99, -0.2f, 0.2f);
    std::copy(b.begin(), b.end(), flat.begin() + p.flat_offset);
  }
  ASSERT_TRUE(cnn->SetParameters(flat).ok());
  const std::vector<float> x = RandomVector(n * cnn->input_size(), 7);
  const std::vector<int32_t> labels = Labels(n, 3);

  // Garbage in the output: ComputeGradient must overwrite every element.
  std::vector<float> grad = RandomVector(cnn->num_parameters(), 8);
  BatchStats stats;
  ASSERT_TRUE(cnn->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(grad), &stats).ok());
  EXPECT_EQ(stats.samples, n);

  auto mean_loss = [&]() {
    EXPECT_TRUE(cnn->SetParameters(flat).ok());
    BatchStats s;
    EXPECT_TRUE(cnn->Evaluate(x.data(), labels.data(), n, &s).ok());
    return s.loss_sum / n;
  };
  EXPECT_NEAR(mean_loss(), stats.loss_sum / n, 1e-6);
  auto numeric = [&](float* w, float eps) {
    const float saved = *w;
    *w = saved + eps;
    const double plus = mean_loss();
    *w = saved - eps;
    const double minus = mean_loss();
    *w = saved;
    return (plus - minus) / (2.0 * eps);
  };

  int retried = 0;
  for (const ParamSpec& p : cnn->params()) {
    double max_abs = 0;
    for (int64_t i = 0; i < p.num_elements; ++i) {
      const float analytic = grad[p.flat_offset + i];
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(analytic)));
      float* w = &flat[p.flat_offset + i];
      auto matches = [&](double num) { return std::fabs(analytic - num) <= 2e-3 + 2e-2 * std::fabs(num); };
      double num = numeric(w, 1e-2f);
      if (!matches(num)) {
        ++retried;
        num = numeric(w, 1e-3f);
        if (!matches(num)) num = numeric(w, 1e-4f);
      }
      EXPECT_NEAR(analytic, num, 2e-3 + 2e-2 * std::fabs(num)) << p.name << " element " << i;
    }
    EXPECT_GT(max_abs, 1e-4) << p.name << ": the check compared only zeros";
  }
  // Near-kinks are few (this seed has one, upstream of most of conv1); retries for most
  // parameters would mean the small steps are covering for a real error.
  EXPECT_LT(retried, cnn->num_parameters() / 4);
}

TEST_F(CnnTest, EmptyBatchGivesZeroGradientAndLeavesStats) {
  std::unique_ptr<Cnn> cnn = MakeCnn(TinyShape());
  ASSERT_TRUE(cnn->InitializeParameters(1).ok());
  std::vector<float> grad(cnn->num_parameters(), 3.0f);
  BatchStats stats;
  stats.loss_sum = 1.5;
  stats.samples = 2;
  ASSERT_TRUE(cnn->ComputeGradient(nullptr, nullptr, 0, absl::MakeSpan(grad), &stats).ok());
  for (float g : grad) ASSERT_EQ(g, 0.0f);
  ASSERT_TRUE(cnn->Evaluate(nullptr, nullptr, 0, &stats).ok());
  EXPECT_EQ(stats.loss_sum, 1.5);
  EXPECT_EQ(stats.samples, 2);
  EXPECT_EQ(stats.correct, 0);
}

TEST_F(CnnTest, BadBatchesAreRefusedWithTheReason) {
  std::unique_ptr<Cnn> cnn = MakeCnn(TinyShape());
  const std::vector<float> x = RandomVector(3 * cnn->input_size(), 1);
  std::vector<float> grad(cnn->num_parameters());
  BatchStats stats;
  const std::vector<int32_t> labels = {0, 2, 3};
  absl::Status status = cnn->ComputeGradient(x.data(), labels.data(), 3, absl::MakeSpan(grad), &stats);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sample 2"));
  EXPECT_THAT(status.message(), HasSubstr("label 3"));
  EXPECT_EQ(stats.samples, 0);

  const std::vector<int32_t> negative = {0, -1, 1};
  status = cnn->Evaluate(x.data(), negative.data(), 3, &stats);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sample 1"));
  EXPECT_EQ(stats.samples, 0);

  EXPECT_EQ(cnn->ComputeGradient(x.data(), labels.data(), -1, absl::MakeSpan(grad), &stats).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> wrong(cnn->num_parameters() + 1);
  const std::vector<int32_t> good = {0, 1, 2};
  status = cnn->ComputeGradient(x.data(), good.data(), 3, absl::MakeSpan(wrong), &stats);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(std::to_string(cnn->num_parameters())));
  EXPECT_EQ(cnn->Evaluate(nullptr, good.data(), 3, &stats).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stats.samples, 0);
}

TEST_F(CnnTest, EvaluateInBatchesAgreesWithOneGradientPass) {
  // More rows than one evaluation batch; the gradient pass then grows the buffers past it.
  const int n = Cnn::kEvalBatch + 50;
  std::unique_ptr<Cnn> cnn = MakeCnn(TinyShape());
  ASSERT_TRUE(cnn->InitializeParameters(8).ok());
  const std::vector<float> x = RandomVector(static_cast<int64_t>(n) * cnn->input_size(), 2);
  const std::vector<int32_t> labels = Labels(n, 3);
  BatchStats eval, train;
  ASSERT_TRUE(cnn->Evaluate(x.data(), labels.data(), n, &eval).ok());
  std::vector<float> grad(cnn->num_parameters());
  ASSERT_TRUE(cnn->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(grad), &train).ok());
  EXPECT_EQ(eval.samples, n);
  EXPECT_EQ(train.samples, n);
  EXPECT_EQ(eval.correct, train.correct);
  EXPECT_NEAR(eval.loss_sum, train.loss_sum, 1e-4 * std::fabs(train.loss_sum));
}

// Three classes told apart by where a bright 3x3 patch sits in a noisy 8x8 image.
TEST_F(CnnTest, SgdStepsReduceTheLossOnASeparableProblem) {
  const int n = 30, side = 8;
  std::unique_ptr<Cnn> cnn = MakeCnn(TinyShape());
  ASSERT_NE(cnn, nullptr);
  ASSERT_TRUE(cnn->InitializeParameters(3).ok());
  std::vector<float> x = RandomVector(n * side * side, 21, 0.0f, 0.3f);
  const std::vector<int32_t> labels = Labels(n, 3);
  const int corner[3][2] = {{0, 0}, {0, 5}, {5, 2}};  // top-left, top-right, bottom-middle
  for (int i = 0; i < n; ++i) {
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) {
        x[(i * side + corner[labels[i]][0] + r) * side + corner[labels[i]][1] + c] += 1.0f;
      }
    }
  }

  std::vector<float> flat(cnn->num_parameters()), grad(cnn->num_parameters());
  ASSERT_TRUE(cnn->GetParameters(absl::MakeSpan(flat)).ok());
  auto loss = [&]() {
    BatchStats s;
    EXPECT_TRUE(cnn->Evaluate(x.data(), labels.data(), n, &s).ok());
    return s;
  };
  const double initial = loss().loss_sum / n;
  for (int step = 0; step < 60; ++step) {
    ASSERT_TRUE(cnn->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(grad), nullptr).ok());
    for (size_t i = 0; i < flat.size(); ++i) flat[i] -= 0.1f * grad[i];
    ASSERT_TRUE(cnn->SetParameters(flat).ok());
  }
  const BatchStats final_stats = loss();
  EXPECT_LT(final_stats.loss_sum / n, 0.5 * initial) << "initial mean loss " << initial;
  EXPECT_GE(final_stats.correct, n * 9 / 10);
}

}  // namespace
}  // namespace model
}  // namespace pstrain
