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

}  // namespace
}  // namespace pstrain::server
