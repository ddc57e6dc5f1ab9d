#include "server/float_ops.h"

#include <vector>

#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

TEST(FloatOpsTest, AddScaledAccumulates) {
  std::vector<float> sum = {1, 2, 3, 4, 5};
  const std::vector<float> x = {2, 4, 6, 8, -10};
  AddScaled(0.25f, x.data(), 5, sum.data());
  EXPECT_EQ(sum, (std::vector<float>{1.5f, 3, 4.5f, 6, 2.5f}));
}

TEST(FloatOpsTest, ScaleStartsASum) {
  std::vector<float> out(5, 99.0f);
  const std::vector<float> x = {2, 4, 6, 8, -10};
  Scale(0.25f, x.data(), 5, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1, 1.5f, 2, -2.5f}));
}

}  // namespace
}  // namespace pstrain::server
