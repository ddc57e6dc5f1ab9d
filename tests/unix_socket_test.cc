// Workers on the same host as a server dial its unix domain socket (LocalEndpoint) when it offers
// one (--unix_socket_dir), and TCP when it does not (the default); either way the job trains the
// same model. Across hosts the
// unix socket is never used: tests/multihost_test checks that.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kJob = {"--mode=sync",      "--epochs=1",      "--train_limit=3000",
                                       "--test_limit=500", "--batch_size=32", "--seed=3"};

TEST(UnixSocketTest, SameHostWorkersUseTheServersUnixSocketsAndTrainTheSameModel) {
  ManualCluster over_unix("unix-socket");
  over_unix.Start(2, 2, kJob, {"--unix_socket_dir=" + over_unix.dir()});
  const std::string unix_summary = RunToEnd(over_unix);
  for (auto& w : over_unix.workers) EXPECT_THAT(w->Output(), HasSubstr("dialling unix:/")) << w->Output();

  ManualCluster over_tcp("tcp-only");
  over_tcp.Start(2, 2, kJob);  // the default offers no socket: workers dial TCP
  const std::string tcp_summary = RunToEnd(over_tcp);
  for (auto& w : over_tcp.workers) EXPECT_THAT(w->Output(), Not(HasSubstr("dialling unix:"))) << w->Output();

  EXPECT_EQ(JsonNumber(unix_summary, "final_test_accuracy"), JsonNumber(tcp_summary, "final_test_accuracy"))
      << unix_summary << "\n"
      << tcp_summary;
}

}  // namespace
}  // namespace pstrain::testing
