// Binary cross-entropy with logits on the CPU backend: against the textbook formula in long
// double where that is accurate, at logits where the textbook formula overflows, and its gradient
// against finite differences.
#include "model/sigmoid_xent.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend.h"
#include "model/cpu_backend.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using testutil::ExpectMatchesFiniteDifferences;
using testutil::RandomVector;
using testutil::ToBackend;
using testutil::ToHost;

class SigmoidXentTest : public ::testing::Test {
 protected:
  XentResult Run(const std::vector<float>& logits, const std::vector<float>& labels, float grad_scale,
                 std::vector<float>* dlogits) {
    const int n = static_cast<int>(logits.size());
    BackendBuffer<float> z = ToBackend(backend_.get(), logits);
    BackendBuffer<float> y = ToBackend(backend_.get(), labels);
    BackendBuffer<float> dz = ToBackend(backend_.get(), std::vector<float>(n, 99.0f));
    const XentResult result = dlogits == nullptr
                                  ? loss_.Forward(backend_.get(), n, z.data(), y.data())
                                  : loss_.ForwardBackward(backend_.get(), n, z.data(), y.data(), grad_scale, dz.data());
    if (dlogits != nullptr) *dlogits = ToHost(backend_.get(), dz, n);
    return result;
  }

  std::unique_ptr<Backend> backend_ = NewCpuBackend();
  SigmoidCrossEntropy loss_;
};

// -y log p - (1 - y) log(1 - p) in long double: accurate for moderate logits.
long double TextbookLoss(float z, float y) {
  const long double p = 1.0L / (1.0L + std::exp(-static_cast<long double>(z)));
  return -y * std::log(p) - (1.0L - y) * std::log(1.0L - p);
}

TEST_F(SigmoidXentTest, LossGradientAndCorrectCountMatchTheFormula) {
  const std::vector<float> logits = {-3.0f, -0.5f, 0.0f, 0.25f, 2.0f, 7.5f};
  const std::vector<float> labels = {0.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.3f};
  std::vector<float> dlogits;
  const float scale = 0.5f;
  const XentResult result = Run(logits, labels, scale, &dlogits);
  long double want = 0;
  for (size_t i = 0; i < logits.size(); ++i) want += TextbookLoss(logits[i], labels[i]);
  EXPECT_NEAR(result.loss_sum, static_cast<double>(want), 1e-12);
  // Correct: -3 vs 0, 2 vs 1; wrong: -0.5 vs 1, 0 vs 1 (p = 0.5 is not > 0.5), 0.25 vs 0,
  // 7.5 vs 0.3.
  EXPECT_EQ(result.correct, 2);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[i])));
    EXPECT_NEAR(dlogits[i], scale * (p - labels[i]), 1e-7) << "sample " << i;
  }
}

TEST_F(SigmoidXentTest, LargeLogitsStayFinite) {
  // exp(100) overflows float and exp(1000) double: the stable form never computes either.
  const std::vector<float> logits = {100.0f, -100.0f, 1000.0f, -1000.0f, 100.0f, -100.0f};
  const std::vector<float> labels = {1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1.0f};
  std::vector<float> dlogits;
  const XentResult result = Run(logits, labels, 1.0f, &dlogits);
  // The four confident right answers cost exp(-|z|) each (about 4e-44 at 100, 0 at 1000); the
  // two confident wrong ones cost |z| each.
  EXPECT_NEAR(result.loss_sum, 200.0, 1e-9);
  EXPECT_EQ(result.correct, 4);
  const std::vector<float> want = {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, -1.0f};
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_TRUE(std::isfinite(dlogits[i]));
    EXPECT_NEAR(dlogits[i], want[i], 1e-30) << "sample " << i;
  }

  BackendBuffer<float> z = ToBackend(backend_.get(), logits);
  loss_.Probabilities(backend_.get(), 6, z.data(), z.data());  // in place
  const std::vector<float> p = ToHost(backend_.get(), z, 6);
  EXPECT_EQ(p[0], 1.0f);
  EXPECT_EQ(p[2], 1.0f);
  EXPECT_EQ(p[3], 0.0f);
  EXPECT_GT(p[1], 0.0f);  // exp(-100) is a float subnormal, not 0
  EXPECT_LT(p[1], 1e-43f);
}

TEST_F(SigmoidXentTest, ProbabilitiesAreTheSigmoid) {
  const std::vector<float> logits = RandomVector(50, 3, -6.0f, 6.0f);
  BackendBuffer<float> z = ToBackend(backend_.get(), logits);
  BackendBuffer<float> p(backend_.get());
  ASSERT_TRUE(p.Reserve(50).ok());
  loss_.Probabilities(backend_.get(), 50, z.data(), p.data());
  const std::vector<float> got = ToHost(backend_.get(), p, 50);
  for (int i = 0; i < 50; ++i) {
    EXPECT_NEAR(got[i], 1.0 / (1.0 + std::exp(-static_cast<double>(logits[i]))), 1e-7);
  }
}

TEST_F(SigmoidXentTest, GradientMatchesFiniteDifferences) {
  std::vector<float> logits = RandomVector(20, 5, -4.0f, 4.0f);
  std::vector<float> labels = RandomVector(20, 6, 0.0f, 1.0f);
  for (int i = 0; i < 10; ++i) labels[i] = std::round(labels[i]);  // hard labels and soft ones
  const float scale = 1.0f / 20;
  std::vector<float> dlogits;
  Run(logits, labels, scale, &dlogits);
  ExpectMatchesFiniteDifferences(
      "logits", &logits, [&] { return scale * Run(logits, labels, 0.0f, nullptr).loss_sum; }, dlogits);
}

TEST_F(SigmoidXentTest, GradientMayOverwriteTheLogits) {
  const std::vector<float> logits = RandomVector(8, 7, -2.0f, 2.0f);
  const std::vector<float> labels = {0, 1, 1, 0, 1, 0, 0, 1};
  std::vector<float> separate;
  const XentResult want = Run(logits, labels, 0.125f, &separate);
  BackendBuffer<float> z = ToBackend(backend_.get(), logits);
  BackendBuffer<float> y = ToBackend(backend_.get(), labels);
  const XentResult got = loss_.ForwardBackward(backend_.get(), 8, z.data(), y.data(), 0.125f, z.data());
  EXPECT_EQ(got.loss_sum, want.loss_sum);
  EXPECT_EQ(ToHost(backend_.get(), z, 8), separate);
}

TEST_F(SigmoidXentTest, EmptyBatchCostsNothing) {
  const XentResult result = loss_.Forward(backend_.get(), 0, nullptr, nullptr);
  EXPECT_EQ(result.loss_sum, 0.0);
  EXPECT_EQ(result.correct, 0);
}

}  // namespace
}  // namespace model
}  // namespace pstrain
