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
void ExpectTrajectory(Optimizer* opt, std::vector<float> weights, const std::vector<std::vector<float>>& grads,
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
  ExpectTrajectory(plain.get(), {1.0f, -2.0f}, {{0.5f, 1.0f}, {0.5f, -3.0f}}, {{0.95, -2.1}, {0.90, -1.8}});

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
  ExpectTrajectory(opt.get(), {1.0f, 0.0f}, {{1, 0}, {1, 0}, {1, 0}}, {{0.81, 0}, {0.539, 0}, {0.1951, 0}});

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

TEST(OptimizerTest, AdamWDecaysTheWeightsApartFromTheMoments) {
  OptimizerOptions options;
  options.type = Type::kAdamW;
  options.weight_decay = 0.1f;
  std::unique_ptr<Optimizer> opt = Make(options, 2);
  // w *= 1 - 0.1 * 0.1, then Adam's step on the plain gradient: element 0 (g = 2 throughout)
  // moves by lr per step after the shrink: 0.99 - 0.1 = 0.89, 0.8811 - 0.1 = 0.7811, ...
  ExpectTrajectory(opt.get(), {1.0f, 1.0f}, {{2, 1}, {2, -2}, {2, 0.5f}},
                   {{0.89, 0.89}, {0.781100001, 0.917710353}, {0.673289001, 0.922202316}});

  // Zero gradient: the moments stay 0 and the weights only shrink, w *= 1 - 0.1 * 0.5 per step
  // (coupled Adam moves by lr per step instead: 0.9, 0.8004, ...).
  options.weight_decay = 0.5f;
  std::unique_ptr<Optimizer> decayed = Make(options, 1);
  ExpectTrajectory(decayed.get(), {1.0f}, {{0}, {0}, {0}}, {{0.95}, {0.9025}, {0.857375}});
}

TEST(OptimizerTest, AdamWFollowsTheScheduledRateInStepAndDecay) {
  OptimizerOptions options;
  options.type = Type::kAdamW;
  options.weight_decay = 0.2f;
  options.schedule.type = LrScheduleOptions::Type::kCosine;
  options.schedule.warmup_steps = 2;
  options.schedule.min_factor = 0.1f;
  std::unique_ptr<Optimizer> opt = Make(options, 2);
  // Base rate 0.1 over 6 steps: 0.05, 0.1 (warm-up), then cosine 0.1, 0.0868198, 0.055, 0.0231802.
  // Each step shrinks by 1 - lr_t * 0.2 and moves by lr_t times the bias-corrected Adam ratio.
  const std::vector<std::vector<float>> grads = {{1, -0.5f}, {-2, 0.25f}, {0.5f, 1}, {3, -1}, {-1, 2}, {0.1f, 0.3f}};
  const std::vector<std::vector<double>> expected = {{0.4450000005, -0.940000001}, {0.472710353, -0.894566298},
                                                     {0.476925212, -0.922408150},  {0.434428225, -0.897695334},
                                                     {0.419629812, -0.908894347},  {0.413735774, -0.913717555}};
  std::vector<float> w = {0.5f, -1.0f};
  for (int64_t step = 0; step < 6; ++step) {
    const float lr = ScheduledLearningRate(0.1f, options.schedule, step, /*total_steps=*/6);
    opt->Apply(step, lr, grads[step].data(), w.data());
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(w[i], expected[step][i], 2e-6) << "step " << step << " element " << i;
    }
  }
}

TEST(OptimizerTest, AdamWWithoutDecayIsAdam) {
  OptimizerOptions options;
  options.type = Type::kAdam;
  std::unique_ptr<Optimizer> adam = Make(options, 3);
  options.type = Type::kAdamW;
  std::unique_ptr<Optimizer> adamw = Make(options, 3);
  ASSERT_EQ(adamw->num_state_vectors(), 2);
  std::vector<float> a = {1, -2, 0.5f}, b = a;
  for (int64_t step = 0; step < 5; ++step) {
    const std::vector<float> g = {0.3f * step - 1, 2.0f / (step + 1), -0.7f};
    adam->Apply(step, 0.05f, g.data(), a.data());
    adamw->Apply(step, 0.05f, g.data(), b.data());
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_FLOAT_EQ(a[i], b[i]) << "element " << i;
    EXPECT_FLOAT_EQ(adam->state_vector(0)[i], adamw->state_vector(0)[i]);
    EXPECT_FLOAT_EQ(adam->state_vector(1)[i], adamw->state_vector(1)[i]);
  }
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
  ExpectTrajectory(decayed.get(), {2.0f}, {{-1}, {3}, {0.5f}}, {{2.1}, {2.00296799}, {1.98225832}});
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
  options.type = Type::kAdamW;
  EXPECT_EQ(Optimizer::Create(options, 4).status().code(), absl::StatusCode::kInvalidArgument);
  options = OptimizerOptions();
  options.type = Type::kAdamW;
  options.weight_decay = std::nanf("");
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
  EXPECT_FLOAT_EQ(ScheduledLearningRate(1.0f, s, 25, 100), 0.1f + 0.9f * 0.5f * (1.0f + std::cos(3.14159265f / 4)));
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
