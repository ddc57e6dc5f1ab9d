// Each optimizer against values worked out by hand (and checked in double precision) for a few
// steps on a few elements; each learning-rate schedule at chosen steps.
#include "model/optimizer.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace model {
namespace {

using Type = OptimizerOptions::Type;

std::unique_ptr<Optimizer> Make(OptimizerOptions options, int64_t n) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(options, n);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(*opt) : nullptr;
}

// Runs one Apply per row of `grads` and checks the weights after each against `expected`.
void ExpectTrajectory(Optimizer* opt, std::vector<float> weights,
                      const std::vector<std::vector<float>>& grads,
                      const std::vector<std::vector<double>>& expected, float lr = 0.1f) {
  for (size_t step = 0; step < grads.size(); ++step) {
    opt->Apply(static_cast<int64_t>(step), lr, grads[step].data(), weights.data());
    for (size_t i = 0; i < weights.size(); ++i) {
      EXPECT_NEAR(weights[i], expected[step][i], 2e-6) << "step " << step << " element " << i;
    }
  }
}

TEST(OptimizerTest, SgdWithAndWithoutWeightDecay) {
  OptimizerOptions options;
  options.type = Type::kSgd;
  std::unique_ptr<Optimizer> plain = Make(options, 2);
  // w -= 0.1 g.
  ExpectTrajectory(plain.get(), {1.0f, -2.0f}, {{0.5f, 1.0f}, {0.5f, -3.0f}},
                   {{0.95, -2.1}, {0.90, -1.8}});

  options.weight_decay = 0.1f;
  std::unique_ptr<Optimizer> decayed = Make(options, 1);
  // g' = 0.5 + 0.1 * 1 = 0.6 -> 0.94; g' = 0.5 + 0.094 = 0.594 -> 0.8806.
  ExpectTrajectory(decayed.get(), {1.0f}, {{0.5f}, {0.5f}}, {{0.94}, {0.8806}});
}

TEST(OptimizerTest, MomentumAccumulatesVelocity) {
  OptimizerOptions options;
  options.type = Type::kMomentum;
  options.momentum = 0.9f;
  std::unique_ptr<Optimizer> opt = Make(options, 1);
  // v = 1, 1.9, 2.71; w = 1 - 0.1 v cumulatively.
  ExpectTrajectory(opt.get(), {1.0f}, {{1}, {1}, {1}}, {{0.9}, {0.71}, {0.439}});

  options.weight_decay = 0.2f;
  std::unique_ptr<Optimizer> decayed = Make(options, 1);
  ExpectTrajectory(decayed.get(), {-0.5f}, {{2}, {0}, {1}}, {{-0.69}, {-0.8472}, {-1.071736}});
}

TEST(OptimizerTest, NesterovLooksAhead) {
  OptimizerOptions options;
  options.type = Type::kNesterov;
  options.momentum = 0.9f;
  std::unique_ptr<Optimizer> opt = Make(options, 2);
  // Element 0, g = 1: v = 1, 1.9, 2.71; w -= 0.1 (1 + 0.9 v) = 0.19, 0.271, 0.3439.
  // Element 1 sees no gradient and stays put.
  ExpectTrajectory(opt.get(), {1.0f, 0.0f}, {{1, 0}, {1, 0}, {1, 0}},
                   {{0.81, 0}, {0.539, 0}, {0.1951, 0}});

  options.weight_decay = 0.2f;
  std::unique_ptr<Optimizer> decayed = Make(options, 1);
  ExpectTrajectory(decayed.get(), {1.0f}, {{1}, {-1}, {2}}, {{0.772}, {0.835464}, {0.404729968}});
}

TEST(OptimizerTest, AdamBiasCorrection) {
  OptimizerOptions options;
  options.type = Type::kAdam;
  options.beta1 = 0.9f;
  options.beta2 = 0.999f;
  options.epsilon = 1e-8f;
  std::unique_ptr<Optimizer> opt = Make(options, 2);
  // A constant gradient moves the weight by exactly lr per step once bias-corrected (without the
  // correction the first step would be 0.1 * 0.2 / sqrt(0.004) = 0.316).
  // Element 1, g = 1, -2, 0.5: m^ = 1, -0.5789, ...; v^ = 1, 2.5008, ...
  ExpectTrajectory(opt.get(), {1.0f, 1.0f}, {{2, 1}, {2, -2}, {2, 0.5f}},
                   {{0.9, 0.9}, {0.8, 0.93661035}, {0.7, 0.95027942}});

  options.weight_decay = 0.5f;
  std::unique_ptr<Optimizer> decayed = Make(options, 1);
  // Zero gradient: only the decay term 0.5 w drives the update.
  ExpectTrajectory(decayed.get(), {1.0f}, {{0}, {0}, {0}}, {{0.9}, {0.80041223}, {0.70158628}});
}

TEST(OptimizerTest, AdagradDividesBySquaredSum) {
  OptimizerOptions options;
  options.type = Type::kAdagrad;
  options.epsilon = 1e-10f;
  std::unique_ptr<Optimizer> opt = Make(options, 1);
  // G = 1, 2, 3: w -= 0.1 / sqrt(G).
  ExpectTrajectory(opt.get(), {1.0f}, {{1}, {1}, {1}}, {{0.9}, {0.82928932}, {0.77155429}});

  options.weight_decay = 0.1f;
  std::unique_ptr<Optimizer> decayed = Make(options, 1);
  ExpectTrajectory(decayed.get(), {2.0f}, {{-1}, {3}, {0.5f}},
                   {{2.1}, {2.00296799}, {1.98225832}});
}

TEST(OptimizerTest, LearningRateArgumentIsUsed) {
  OptimizerOptions options;
  options.type = Type::kSgd;
  options.lr = 123.0f;  // the base rate; Apply's rate wins
  std::unique_ptr<Optimizer> opt = Make(options, 1);
  std::vector<float> w = {1.0f};
  const float g = 1.0f;
  opt->Apply(0, 0.25f, &g, w.data());
  EXPECT_FLOAT_EQ(w[0], 0.75f);
}

TEST(OptimizerTest, StateVectorsMatchTheOptimizer) {
  OptimizerOptions options;
  options.type = Type::kAdam;
  std::unique_ptr<Optimizer> adam = Make(options, 3);
  ASSERT_EQ(adam->num_state_vectors(), 2);
  std::vector<float> w = {1, 1, 1};
  const std::vector<float> g = {1, 2, 3};
  adam->Apply(0, 0.1f, g.data(), w.data());
  // m = (1 - b1) g.
  EXPECT_NEAR(adam->state_vector(0)[2], 0.3f, 1e-6);
  options.type = Type::kSgd;
  EXPECT_EQ(Make(options, 3)->num_state_vectors(), 0);
  options.type = Type::kNesterov;
  EXPECT_EQ(Make(options, 3)->num_state_vectors(), 1);
}

TEST(OptimizerTest, CreateRefusesBadOptions) {
  OptimizerOptions options;
  EXPECT_EQ(Optimizer::Create(options, -1).status().code(), absl::StatusCode::kInvalidArgument);
  options.lr = 0;
  EXPECT_EQ(Optimizer::Create(options, 4).status().code(), absl::StatusCode::kInvalidArgument);
  options = OptimizerOptions();
  options.type = Type::kMomentum;
  options.momentum = 1.0f;
  const absl::Status status = Optimizer::Create(options, 4).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("momentum"), absl::string_view::npos) << status;
  options = OptimizerOptions();
  options.type = Type::kAdam;
  options.beta2 = 1.5f;
  EXPECT_EQ(Optimizer::Create(options, 4).status().code(), absl::StatusCode::kInvalidArgument);
  options = OptimizerOptions();
  options.type = Type::kAdagrad;
  options.epsilon = 0;
  EXPECT_EQ(Optimizer::Create(options, 4).status().code(), absl::StatusCode::kInvalidArgument);
  options = OptimizerOptions();
  options.weight_decay = -0.1f;
  EXPECT_EQ(Optimizer::Create(options, 4).status().code(), absl::StatusCode::kInvalidArgument);
  options = OptimizerOptions();
  options.schedule.type = LrScheduleOptions::Type::kStep;
  options.schedule.step_size = 0;
  EXPECT_EQ(Optimizer::Create(options, 4).status().code(), absl::StatusCode::kInvalidArgument);
  options.schedule.step_size = 10;
  EXPECT_TRUE(Optimizer::Create(options, 4).ok());
  EXPECT_TRUE(Optimizer::Create(options, 0).ok());
}

TEST(LrScheduleTest, ConstantWithWarmup) {
  LrScheduleOptions s;
  s.warmup_steps = 4;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 0, 100), 0.25f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 1, 100), 0.5f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 3, 100), 1.0f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 4, 100), 1.0f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(2.0f, s, 99, 100), 2.0f);
  s.warmup_steps = 0;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(0.5f, s, 0, 100), 0.5f);
}

TEST(LrScheduleTest, StepDecay) {
  LrScheduleOptions s;
  s.type = LrScheduleOptions::Type::kStep;
  s.step_size = 10;
  s.gamma = 0.5f;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 0, 100), 1.0f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 9, 100), 1.0f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 10, 100), 0.5f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 25, 100), 0.25f);
  // The decay clock starts after the warm-up.
  s.warmup_steps = 5;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 0, 100), 0.2f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 14, 100), 1.0f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 15, 100), 0.5f);
}

TEST(LrScheduleTest, CosineEndsAndMiddle) {
  LrScheduleOptions s;
  s.type = LrScheduleOptions::Type::kCosine;
  s.min_factor = 0.1f;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 0, 100), 1.0f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 50, 100), 0.55f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 25, 100),
                  0.1f + 0.9f * 0.5f * (1.0f + std::cos(3.14159265f / 4)));
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 100, 100), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 150, 100), 0.1f);
  // With warm-up the cosine runs over the remaining steps.
  s.warmup_steps = 10;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 4, 110), 0.5f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 10, 110), 1.0f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 60, 110), 0.55f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 110, 110), 0.1f);
  // Monotone between the ends.
  float previous = 2.0f;
  for (int64_t step = 10; step <= 110; ++step) {
    const float lr = ScheduledLearningRate(1.0f, s, step, 110);
    EXPECT_LE(lr, previous) << "step " << step;
    previous = lr;
  }
}

TEST(LrScheduleTest, ValidateNamesTheField) {
  LrScheduleOptions s;
  s.warmup_steps = -1;
  EXPECT_NE(ValidateLrSchedule(s).message().find("warmup_steps"), absl::string_view::npos);
  s = LrScheduleOptions();
  s.type = LrScheduleOptions::Type::kCosine;
  s.min_factor = 1.5f;
  EXPECT_NE(ValidateLrSchedule(s).message().find("min_factor"), absl::string_view::npos);
  s.min_factor = 0.0f;
  EXPECT_TRUE(ValidateLrSchedule(s).ok());
}

}  // namespace
}  // namespace model
}  // namespace pstrain
