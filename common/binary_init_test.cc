#include "common/binary_init.h"

#include <gflags/gflags.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

DEFINE_int32(env_test_port, 0, "a flag for the test");
DEFINE_string(env_test_host, "127.0.0.1", "a flag for the test");
DEFINE_bool(env_test_overlap, true, "a flag for the test");

namespace pstrain {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

bool IsDefault(const char* name) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(name, &info) && info.is_default;
}

class SetFlagsFromEnvironmentTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name : {"PSTRAIN_ENV_TEST_PORT", "PSTRAIN_ENV_TEST_HOST", "PSTRAIN_ENV_TEST_OVERLAP",
                             "PSTRAIN_NO_SUCH_FLAG_ANYWHERE"}) {
      unsetenv(name);
    }
  }
  // Puts every flag back (value and "given") after each test.
  gflags::FlagSaver saver_;
};

TEST_F(SetFlagsFromEnvironmentTest, VariablesSetTheirFlagsAsIfGiven) {
  setenv("PSTRAIN_ENV_TEST_PORT", "7001", 1);
  setenv("PSTRAIN_ENV_TEST_HOST", "0.0.0.0", 1);
  setenv("PSTRAIN_ENV_TEST_OVERLAP", "false", 1);
  std::vector<std::string> unknown;
  ASSERT_TRUE(SetFlagsFromEnvironment(&unknown).ok());
  EXPECT_EQ(FLAGS_env_test_port, 7001);
  EXPECT_EQ(FLAGS_env_test_host, "0.0.0.0");
  EXPECT_FALSE(FLAGS_env_test_overlap);
  // Given, as far as "was it given?" checks (common/job_flags.cc) can tell.
  EXPECT_FALSE(IsDefault("env_test_port"));
  EXPECT_FALSE(IsDefault("env_test_host"));
  EXPECT_TRUE(unknown.empty() || std::find(unknown.begin(), unknown.end(), "PSTRAIN_ENV_TEST_PORT") == unknown.end());
}

TEST_F(SetFlagsFromEnvironmentTest, TheCommandLineWinsOverTheEnvironment) {
  setenv("PSTRAIN_ENV_TEST_PORT", "7001", 1);
  ASSERT_TRUE(SetFlagsFromEnvironment(nullptr).ok());
  std::vector<std::string> args = {"test", "--env_test_port=7002"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = 2;
  char** argv_ptr = argv.data();
  gflags::ParseCommandLineFlags(&argc, &argv_ptr, /*remove_flags=*/true);
  EXPECT_EQ(FLAGS_env_test_port, 7002);
}

TEST_F(SetFlagsFromEnvironmentTest, VariablesThatNameNoFlagAreSkippedAndListed) {
  setenv("PSTRAIN_NO_SUCH_FLAG_ANYWHERE", "1", 1);
  std::vector<std::string> unknown;
  ASSERT_TRUE(SetFlagsFromEnvironment(&unknown).ok());
  EXPECT_THAT(unknown, Contains("PSTRAIN_NO_SUCH_FLAG_ANYWHERE"));
  EXPECT_TRUE(IsDefault("env_test_port"));
}

TEST_F(SetFlagsFromEnvironmentTest, ABadValueNamesTheVariableTheValueAndTheExpectation) {
  setenv("PSTRAIN_ENV_TEST_PORT", "abc", 1);
  absl::Status status = SetFlagsFromEnvironment(nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("PSTRAIN_ENV_TEST_PORT='abc'"));
  EXPECT_THAT(status.message(), HasSubstr("--env_test_port"));
  EXPECT_THAT(status.message(), HasSubstr("expected an integer"));
  EXPECT_EQ(FLAGS_env_test_port, 0);

  unsetenv("PSTRAIN_ENV_TEST_PORT");
  setenv("PSTRAIN_ENV_TEST_OVERLAP", "maybe", 1);
  status = SetFlagsFromEnvironment(nullptr);
  EXPECT_THAT(status.message(), HasSubstr("expected true or false"));
}

}  // namespace
}  // namespace pstrain
