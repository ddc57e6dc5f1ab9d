// Bad flags and bad data fail before anything trains, with a message that says what is wrong.
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

RunResult Launch(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinDir() + "/pstrain-launch"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<RunResult> r = Run(argv, absl::Seconds(60));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : RunResult{};
}

TEST(CliTest, BadJobFlagsFailBeforeAnythingStarts) {
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const Case cases[] = {
      {{"--workers=0"}, "--workers: got 0"},
      {{"--lr=-0.1"}, "--lr: got -0.1"},
      {{"--mode=fast"}, "mode: got 'fast', expected sync, async or ssp"},
      {{"--optimizer=lion"}, "optimizer: got 'lion'"},
      {{"--hidden=256,x"}, "--hidden"},
      {{"--lr_schedule=step"}, "step_size"},
      {{"--config=/nonexistent/job.textproto"}, "/nonexistent/job.textproto"},
  };
  for (const Case& c : cases) {
    RunResult r = Launch(c.flags);
    EXPECT_EQ(r.exit_code, 2) << c.flags[0] << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << c.flags[0];
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("[server"))) << "a server was started for " << c.flags[0];
  }
}

TEST(CliTest, RolesWithoutASchedulerAddressExitWithUsage) {
  for (const char* binary : {"/pstrain-server", "/pstrain-worker"}) {
    absl::StatusOr<RunResult> r = testing::Run({BinDir() + binary}, absl::Seconds(30));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 2) << binary;
    EXPECT_THAT(r->output, HasSubstr("--scheduler")) << binary;
  }
}

TEST(CliTest, CorruptDataFileFailsTheJobNamingTheFile) {
  std::string dir = MakeTempDir("corrupt-data");
  // Right magic for an image file, then far fewer bytes than the header promises.
  for (const char* name : {"train-images-idx3-ubyte", "t10k-images-idx3-ubyte"}) {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    const unsigned char header[] = {0, 0, 8, 3, 0, 0, 0, 100, 0, 0, 0, 28, 0, 0, 0, 28, 1, 2, 3};
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
  }
  for (const char* name : {"train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"}) {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    const unsigned char header[] = {0, 0, 8, 1, 0, 0, 0, 100};
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    for (int i = 0; i < 100; ++i) out.put(static_cast<char>(i % 10));
  }
  RunResult r = Launch({"--data_dir=" + dir, "--epochs=1"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("images-idx3-ubyte"));
  EXPECT_THAT(r.output, HasSubstr("truncated"));
}

TEST(CliTest, MissingDataDirectoryNamesTheFile) {
  RunResult r = Launch({"--data_dir=/nonexistent-data", "--epochs=1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent-data/train"));
}

}  // namespace
}  // namespace pstrain::testing
