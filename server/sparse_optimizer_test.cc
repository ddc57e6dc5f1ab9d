#include "server/sparse_optimizer.h"

#include <cstdint>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pstrain::server {
namespace {

using Type = SparseOptimizerOptions::Type;
using ::testing::HasSubstr;

// References below were computed by hand from the formulas in sparse_optimizer.h (in double);
// float32 arithmetic agrees to ~1e-6.
constexpr float kTol = 2e-6f;

struct Step {
  std::vector<float> grad;
  std::vector<float> w;      // expected weights after the step
  std::vector<float> state;  // expected state after the step (all vectors back to back)
};

void RunSteps(const SparseOptimizerOptions& options, float lr, std::vector<float> w, const std::vector<Step>& steps,
              uint32_t* step_count = nullptr) {
  const int dim = static_cast<int>(w.size());
  std::vector<float> state(StateFloatsPerElement(options.type) * dim);
  uint32_t step = 0;
  InitRowState(options, dim, state.data(), &step);
  for (size_t s = 0; s < steps.size(); ++s) {
    ApplyRowUpdate(options, dim, lr, steps[s].grad.data(), w.data(), state.data(), &step);
    for (int i = 0; i < dim; ++i) {
      EXPECT_NEAR(w[i], steps[s].w[i], kTol) << "step " << s << " w[" << i << "]";
    }
    for (size_t i = 0; i < state.size(); ++i) {
      EXPECT_NEAR(state[i], steps[s].state[i], kTol * (1 + std::abs(steps[s].state[i])))
          << "step " << s << " state[" << i << "]";
    }
  }
  if (step_count != nullptr) *step_count = step;
}

TEST(SparseOptimizerTest, AdagradAccumulatesFromTheInitialAccumulator) {
  SparseOptimizerOptions options;  // Adagrad, initial_accumulator 0.1, eps 1e-8
  RunSteps(options, 0.1f, {1.0f, -0.5f},
           {{{1.0f, -2.0f}, {0.904653742f, -0.401227041f}, {1.1f, 4.1f}},
            {{2.0f, 0.5f}, {0.816092254f, -0.425200206f}, {5.1f, 4.35f}},
            {{-0.5f, 0.25f}, {0.837709139f, -0.437101595f}, {5.35f, 4.4125f}}});
}

TEST(SparseOptimizerTest, SgdStepsAgainstTheGradient) {
  SparseOptimizerOptions options;
  options.type = Type::kSgd;
  RunSteps(options, 0.1f, {1.0f, -0.5f}, {{{1.0f, -2.0f}, {0.9f, -0.3f}, {}}, {{2.0f, 0.5f}, {0.7f, -0.35f}, {}}});
}

TEST(SparseOptimizerTest, LazyAdamCorrectsBiasWithTheRowsOwnStepCount) {
  SparseOptimizerOptions options;
  options.type = Type::kLazyAdam;
  uint32_t steps = 0;
  RunSteps(options, 0.01f, {1.0f, -0.5f},
           {{{1.0f, -2.0f}, {0.99f, -0.49f}, {0.1f, -0.2f, 0.001f, 0.004f}},
            {{2.0f, 0.5f}, {0.98034818f, -0.485305318f}, {0.29f, -0.13f, 0.004999f, 0.004246f}},
            {{-0.5f, 0.25f}, {0.974462113f, -0.482472537f}, {0.211f, -0.092f, 0.005244001f, 0.004304254f}}},
           &steps);
  EXPECT_EQ(steps, 3u);
}

TEST(SparseOptimizerTest, FtrlWithL1GivesExactZerosWhileZIsSmall) {
  SparseOptimizerOptions options;
  options.type = Type::kFtrl;
  options.initial_accumulator = 0.0f;
  options.ftrl_beta = 1.0f;
  options.l1 = 1.0f;
  options.l2 = 0.5f;
  // Element 0 keeps |z| <= l1 for two steps (weight exactly 0), then crosses it.
  RunSteps(options, 0.5f, {0.0f, 0.0f},
           {{{0.4f, -3.0f}, {0.0f, 0.235294118f}, {0.4f, -3.0f, 0.16f, 9.0f}},
            {{0.3f, -1.0f}, {0.0f, 0.348614275f}, {0.7f, -4.07636596f, 0.25f, 10.0f}},
            {{-2.0f, 0.5f}, {0.0452959709f, 0.292454214f}, {-1.3f, -3.6037562f, 4.25f, 10.25f}}});
}

TEST(SparseOptimizerTest, FtrlWeightIsExactlyZeroNotJustSmall) {
  SparseOptimizerOptions options;
  options.type = Type::kFtrl;
  options.l1 = 10.0f;
  std::vector<float> w = {0.25f}, state(2);
  InitRowState(options, 1, state.data(), nullptr);
  const float grad = 3.0f;
  ApplyRowUpdate(options, 1, 0.1f, &grad, w.data(), state.data(), nullptr);
  EXPECT_EQ(w[0], 0.0f);  // |z| = 3 - sigma * 0.25 <= l1
}

TEST(SparseOptimizerTest, ValidationNamesTheField) {
  SparseOptimizerOptions options;
  EXPECT_TRUE(ValidateSparseOptimizer(options).ok());
  options.initial_accumulator = -1.0f;
  EXPECT_THAT(ValidateSparseOptimizer(options).message(), HasSubstr("initial_accumulator: got -1"));
  options = SparseOptimizerOptions();
  options.type = Type::kLazyAdam;
  options.beta2 = 1.0f;
  EXPECT_THAT(ValidateSparseOptimizer(options).message(), HasSubstr("beta2: got 1, expected [0, 1)"));
  options = SparseOptimizerOptions();
  options.type = Type::kFtrl;
  options.l1 = -0.5f;
  EXPECT_EQ(ValidateSparseOptimizer(options).code(), absl::StatusCode::kInvalidArgument);
  options.type = static_cast<Type>(17);
  EXPECT_THAT(ValidateSparseOptimizer(options).message(), HasSubstr("type: got 17"));
}

TEST(SparseOptimizerTest, StateSizes) {
  EXPECT_EQ(StateFloatsPerElement(Type::kAdagrad), 1);
  EXPECT_EQ(StateFloatsPerElement(Type::kSgd), 0);
  EXPECT_EQ(StateFloatsPerElement(Type::kLazyAdam), 2);
  EXPECT_EQ(StateFloatsPerElement(Type::kFtrl), 2);
  EXPECT_TRUE(HasRowStepCount(Type::kLazyAdam));
  EXPECT_FALSE(HasRowStepCount(Type::kAdagrad));
}

}  // namespace
}  // namespace pstrain::server
