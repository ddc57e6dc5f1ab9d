#include "model/build_fingerprint.h"

#include "gtest/gtest.h"

namespace pstrain::model {
namespace {

TEST(BuildFingerprintTest, IsNotZeroAndTheSameEveryTime) {
  const uint64_t fingerprint = BuildFingerprint();
  EXPECT_NE(fingerprint, 0u);
  EXPECT_EQ(BuildFingerprint(), fingerprint);
}

}  // namespace
}  // namespace pstrain::model
