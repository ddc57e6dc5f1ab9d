#include "scheduler/barrier_names.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::scheduler {
namespace {

using ::testing::HasSubstr;

BarrierRequest Request(const std::string& name, BarrierRequest::Participants group, Role role = WORKER) {
  BarrierRequest r;
  r.set_name(name);
  r.set_participants(group);
  r.set_role(role);
  r.set_rank(2);
  return r;
}

TEST(BarrierNamesTest, TheJobsBarriersAreAccepted) {
  EXPECT_TRUE(CheckBarrierRequest(Request("servers-ready", BarrierRequest::ALL), 3).ok());
  EXPECT_TRUE(CheckBarrierRequest(Request("servers-ready", BarrierRequest::ALL, SERVER), 3).ok());
  EXPECT_TRUE(CheckBarrierRequest(Request("epoch-0-trained", BarrierRequest::WORKERS), 3).ok());
  EXPECT_TRUE(CheckBarrierRequest(Request("epoch-2-trained", BarrierRequest::PARTICIPANTS_UNSPECIFIED), 3).ok());
  EXPECT_TRUE(CheckBarrierRequest(Request("epoch-2-trained", BarrierRequest::WORKERS, ROLE_UNSPECIFIED), 3).ok());
}

TEST(BarrierNamesTest, AnyOtherNameIsRefusedNamingTheKnownOnes) {
  const absl::Status s = CheckBarrierRequest(Request("an-insiders-barrier", BarrierRequest::WORKERS), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "barrier from worker 2: unknown barrier name 'an-insiders-barrier'; the job's barriers are "
            "'servers-ready' (ALL) and 'epoch-<N>-trained' (WORKERS) for N in [0, 3)");
  for (const char* name : {"", "servers-ready ", "epoch--trained", "epoch-01-trained", "epoch-+1-trained",
                           "epoch--1-trained", "epoch-1-trainedx", "epoch-99999999999-trained"}) {
    EXPECT_EQ(CheckBarrierRequest(Request(name, BarrierRequest::WORKERS), 3).code(), absl::StatusCode::kInvalidArgument)
        << "'" << name << "'";
  }
}

TEST(BarrierNamesTest, AHugeNameIsRefusedWithoutQuotingIt) {
  const absl::Status s = CheckBarrierRequest(Request(std::string(1 << 20, 'x'), BarrierRequest::WORKERS), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("barrier name of 1048576 bytes (limit 64)"));
  EXPECT_LT(s.message().size(), 300u);
}

TEST(BarrierNamesTest, AnEpochOutsideTheJobIsRefused) {
  const absl::Status s = CheckBarrierRequest(Request("epoch-3-trained", BarrierRequest::WORKERS), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("barrier 'epoch-3-trained' names no epoch of the job"));
}

TEST(BarrierNamesTest, TheWrongGroupOrRoleIsRefused) {
  EXPECT_EQ(CheckBarrierRequest(Request("servers-ready", BarrierRequest::WORKERS), 3).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckBarrierRequest(Request("epoch-0-trained", BarrierRequest::ALL), 3).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status s = CheckBarrierRequest(Request("epoch-0-trained", BarrierRequest::WORKERS, SERVER), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is for workers only"));
}

}  // namespace
}  // namespace pstrain::scheduler
