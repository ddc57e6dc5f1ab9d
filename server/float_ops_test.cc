#include "server/float_ops.h"

#include <cmath>
#include <limits>
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

TEST(FloatOpsTest, SumOfSquaresCoversEveryElementInEveryLengthAndDoesNotOverflow) {
  for (int n : {0, 1, 7, 8, 9, 17, 1000, 1003}) {
    std::vector<float> x(static_cast<size_t>(n));
    double want = 0;
    for (int i = 0; i < n; ++i) {
      x[i] = 0.5f + static_cast<float>(i % 13) - 3.0f;
      want += static_cast<double>(x[i]) * x[i];
    }
    EXPECT_EQ(SumOfSquares(x.data(), n), want) << "n = " << n;  // small integers' halves: exact
  }
  const std::vector<float> huge(9, 1e20f);  // float32 squares would be inf
  const double square = static_cast<double>(1e20f) * 1e20f;
  EXPECT_DOUBLE_EQ(SumOfSquares(huge.data(), 9), 9 * square);
  std::vector<float> bad(11, 1.0f);
  bad[10] = std::numeric_limits<float>::quiet_NaN();  // the tail, past the last group of eight
  EXPECT_TRUE(std::isnan(SumOfSquares(bad.data(), 11)));
}

}  // namespace
}  // namespace pstrain::server
