// The demo job end to end on the whole Fashion-MNIST data set: the README's promise.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

double RunDemo(const std::vector<std::string>& flags) {
  absl::StatusOr<ClusterRun> run = LaunchCluster("demo", flags, absl::Minutes(10));
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return 0;
  EXPECT_EQ(run->exit_code, 0) << run->output;
  std::cout << run->summary_json << "\n";
  return JsonNumber(run->summary_json, "final_test_accuracy");
}

TEST(DemoE2ETest, SyncDemoReaches88Percent) { EXPECT_GE(RunDemo({}), 0.88); }

TEST(DemoE2ETest, AsyncDemoReaches87Percent) { EXPECT_GE(RunDemo({"--mode=async"}), 0.87); }

TEST(DemoE2ETest, SspDemoReaches87Percent) { EXPECT_GE(RunDemo({"--mode=ssp"}), 0.87); }

}  // namespace
}  // namespace pstrain::testing
