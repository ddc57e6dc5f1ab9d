#include "scheduler/member_limits.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::scheduler {
namespace {

using ::testing::HasSubstr;

TEST(MemberLimitsTest, RegistrationStringsHaveALimit) {
  RegisterRequest r;
  r.set_role(WORKER);
  r.set_address("127.0.0.1:4000");
  r.set_instance_id("host:123:abcdef");
  r.set_metrics_address("127.0.0.1:9100");
  EXPECT_TRUE(CheckRegisterRequest(r).ok());
  r.set_address(std::string(kMaxAddressBytes, 'a'));
  EXPECT_TRUE(CheckRegisterRequest(r).ok());
  r.set_address(std::string(1 << 20, 'a'));
  absl::Status s = CheckRegisterRequest(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "register worker: address is 1048576 bytes, the limit is 300");
  r.set_address("h:1");
  r.set_metrics_address(std::string(kMaxAddressBytes + 1, 'm'));
  EXPECT_THAT(CheckRegisterRequest(r).message(), HasSubstr("metrics_address is 301 bytes"));
  r.set_metrics_address("");
  r.set_instance_id(std::string(kMaxInstanceIdBytes + 1, 'i'));
  EXPECT_THAT(CheckRegisterRequest(r).message(), HasSubstr("instance_id"));
  r.set_instance_id("");
  r.mutable_local()->set_unix_address(std::string(kMaxSocketPathBytes + 1, 'u'));
  EXPECT_THAT(CheckRegisterRequest(r).message(), HasSubstr("local.unix_address"));
}

TEST(MemberLimitsTest, HeartbeatTableUsagesHaveALimit) {
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  hb.add_tables()->set_table("user");
  EXPECT_TRUE(CheckHeartbeatRequest(hb).ok());
  hb.add_tables()->set_table(std::string(kMaxTableNameBytes + 1, 't'));
  EXPECT_EQ(CheckHeartbeatRequest(hb).code(), absl::StatusCode::kInvalidArgument);
  hb.clear_tables();
  for (int i = 0; i <= kMaxTableUsages; ++i) hb.add_tables();
  EXPECT_THAT(CheckHeartbeatRequest(hb).message(), HasSubstr("table usages, the limit is"));
}

TEST(MemberLimitsTest, LongReasonsAreCutOnACharacterBoundary) {
  EXPECT_EQ(BoundedReason("out of memory"), "out of memory");
  const std::string exact(kMaxReasonBytes, 'x');
  EXPECT_EQ(BoundedReason(exact), exact);
  const std::string cut = BoundedReason(std::string(1 << 20, 'x'));
  EXPECT_EQ(cut,
            std::string(kMaxReasonBytes, 'x') + "... (" + std::to_string((1 << 20) - kMaxReasonBytes) + " bytes cut)");
  // "é" is two bytes: one straddling the limit is not split.
  std::string accents = std::string(kMaxReasonBytes - 1, 'x');
  for (int i = 0; i < 10; ++i) accents += "\xc3\xa9";
  const std::string kept = BoundedReason(accents);
  EXPECT_EQ(kept.substr(0, kMaxReasonBytes), std::string(kMaxReasonBytes - 1, 'x') + ".");
}

}  // namespace
}  // namespace pstrain::scheduler
