#include "model/init.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "model/mlp.h"

namespace pstrain {
namespace model {
namespace {

ParamSpec HeSpec(int64_t in, int64_t out) {
  ParamSpec spec;
  spec.name = "fc1.weight";
  spec.shape = {in, out};
  spec.num_elements = in * out;
  spec.init = InitKind::kHeUniform;
  spec.fan_in = in;
  spec.fan_out = out;
  return spec;
}

TEST(InitTest, SameInputsGiveSameValues) {
  const ParamSpec spec = HeSpec(100, 50);
  for (int64_t i : {0, 1, 17, 4999}) {
    EXPECT_EQ(InitialValue(7, 2, i, spec), InitialValue(7, 2, i, spec));
  }
  std::vector<float> a(spec.num_elements), b(spec.num_elements);
  FillInitialValues(7, 2, spec, 0, spec.num_elements, a.data());
  FillInitialValues(7, 2, spec, 0, spec.num_elements, b.data());
  EXPECT_EQ(a, b);
}

TEST(InitTest, FillingInPiecesEqualsFillingAtOnce) {
  const ParamSpec spec = HeSpec(37, 29);
  std::vector<float> whole(spec.num_elements);
  FillInitialValues(3, 4, spec, 0, spec.num_elements, whole.data());
  // Uneven pieces, as three servers holding chunks of the tensor would fill them.
  std::vector<float> pieces(spec.num_elements);
  const int64_t cuts[] = {0, 1, 400, 401, 1000, spec.num_elements};
  for (int c = 0; c + 1 < 6; ++c) {
    FillInitialValues(3, 4, spec, cuts[c], cuts[c + 1] - cuts[c], pieces.data() + cuts[c]);
  }
  EXPECT_EQ(whole, pieces);
  for (int64_t i = 0; i < spec.num_elements; i += 97) {
    EXPECT_EQ(whole[i], InitialValue(3, 4, i, spec)) << "element " << i;
  }
}

TEST(InitTest, HeValuesStayInBoundsWithMeanNearZero) {
  const ParamSpec spec = HeSpec(784, 256);
  std::vector<float> v(spec.num_elements);
  FillInitialValues(1, 0, spec, 0, spec.num_elements, v.data());
  const float bound = std::sqrt(6.0f / 784.0f);
  double sum = 0, sum_sq = 0;
  float lo = bound, hi = -bound;
  for (float x : v) {
    ASSERT_GE(x, -bound);
    ASSERT_LE(x, bound);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01 * bound);
  // Uniform on [-b, b] has variance b^2 / 3.
  EXPECT_NEAR(sum_sq / n, bound * bound / 3.0, 0.02 * bound * bound);
  // The whole range is used.
  EXPECT_LT(lo, -0.99f * bound);
  EXPECT_GT(hi, 0.99f * bound);
}

TEST(InitTest, GlorotBoundUsesFanInAndFanOut) {
  ParamSpec spec = HeSpec(128, 10);
  spec.init = InitKind::kGlorotUniform;
  const float bound = std::sqrt(6.0f / 138.0f);
  float max_abs = 0;
  for (int64_t i = 0; i < spec.num_elements; ++i) {
    max_abs = std::max(max_abs, std::fabs(InitialValue(5, 4, i, spec)));
  }
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.95f * bound);  // 1280 draws: above 0.95 b with near certainty
}

TEST(InitTest, ZerosAreZero) {
  ParamSpec spec = HeSpec(10, 10);
  spec.init = InitKind::kZeros;
  std::vector<float> v(spec.num_elements, 1.0f);
  FillInitialValues(9, 1, spec, 0, spec.num_elements, v.data());
  for (float x : v) EXPECT_EQ(x, 0.0f);
  EXPECT_EQ(InitialValue(9, 1, 5, spec), 0.0f);
}

TEST(InitTest, DifferentTensorsAndSeedsDiffer) {
  const ParamSpec spec = HeSpec(20, 20);
  std::vector<float> base(400), other_tensor(400), other_seed(400);
  FillInitialValues(1, 0, spec, 0, 400, base.data());
  FillInitialValues(1, 2, spec, 0, 400, other_tensor.data());
  FillInitialValues(2, 0, spec, 0, 400, other_seed.data());
  int same_tensor = 0, same_seed = 0;
  for (int i = 0; i < 400; ++i) {
    same_tensor += base[i] == other_tensor[i];
    same_seed += base[i] == other_seed[i];
  }
  EXPECT_LE(same_tensor, 1);
  EXPECT_LE(same_seed, 1);
}

TEST(InitTest, NeighbouringElementsAreUncorrelated) {
  const ParamSpec spec = HeSpec(100, 100);
  std::vector<float> v(spec.num_elements);
  FillInitialValues(1, 0, spec, 0, spec.num_elements, v.data());
  double cov = 0, var = 0;
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    cov += static_cast<double>(v[i]) * v[i + 1];
    var += static_cast<double>(v[i]) * v[i];
  }
  EXPECT_LT(std::fabs(cov / var), 0.05);
}

TEST(InitTest, MlpLayoutUsesHeThenGlorot) {
  const std::vector<ParamSpec> specs = MlpParamSpecs({784, 256, 128, 10});
  ASSERT_EQ(specs.size(), 6u);
  EXPECT_EQ(specs[0].name, "fc1.weight");
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{784, 256}));
  EXPECT_EQ(specs[0].init, InitKind::kHeUniform);
  EXPECT_EQ(specs[1].name, "fc1.bias");
  EXPECT_EQ(specs[1].shape, (std::vector<int64_t>{256}));
  EXPECT_EQ(specs[1].init, InitKind::kZeros);
  EXPECT_EQ(specs[1].flat_offset, 784 * 256);
  EXPECT_EQ(specs[2].init, InitKind::kHeUniform);
  EXPECT_EQ(specs[4].name, "fc3.weight");
  EXPECT_EQ(specs[4].init, InitKind::kGlorotUniform);
  EXPECT_EQ(specs[4].fan_in, 128);
  EXPECT_EQ(specs[4].fan_out, 10);
  EXPECT_EQ(specs[5].flat_offset + specs[5].num_elements, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(TotalElements(specs), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
}

}  // namespace
}  // namespace model
}  // namespace pstrain
