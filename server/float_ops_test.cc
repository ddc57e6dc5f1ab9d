#include "server/float_ops.h"

#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

std::vector<char> Bytes(const std::vector<float>& values) {
  std::vector<char> out(4 * values.size());
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(FloatOpsTest, FindNonFiniteReturnsFirstBadIndexAtAnyAlignment) {
  std::vector<float> values(37, 1.5f);
  values[0] = -0.0f;
  values[1] = std::numeric_limits<float>::denorm_min();
  values[2] = std::numeric_limits<float>::max();
  std::vector<char> bytes = Bytes(values);
  EXPECT_EQ(FindNonFinite(bytes.data(), 37), -1);

  values[29] = std::numeric_limits<float>::infinity();
  values[33] = std::numeric_limits<float>::quiet_NaN();
  bytes = Bytes(values);
  EXPECT_EQ(FindNonFinite(bytes.data(), 37), 29);
  EXPECT_EQ(NonFiniteName(bytes.data(), 29), "inf");
  EXPECT_EQ(NonFiniteName(bytes.data(), 33), "nan");
  EXPECT_EQ(FindNonFinite(bytes.data(), 29), -1);  // only the first n values are looked at

  // Wire bytes need not be aligned.
  std::vector<char> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  EXPECT_EQ(FindNonFinite(shifted.data() + 1, 37), 29);
}

TEST(FloatOpsTest, AddScaledAccumulates) {
  std::vector<float> sum = {1, 2, 3, 4, 5};
  const std::vector<float> x = {2, 4, 6, 8, -10};
  AddScaled(0.25f, x.data(), 5, sum.data());
  EXPECT_EQ(sum, (std::vector<float>{1.5f, 3, 4.5f, 6, 2.5f}));
}

}  // namespace
}  // namespace pstrain::server
