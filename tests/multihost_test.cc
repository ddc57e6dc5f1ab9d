// A job whose roles run on five different hosts with real, non-loopback addresses (the project's
// own test hosts: network namespaces on one virtual segment, tests/test_hosts.h), started exactly
// as README.md's "Run on a cluster by hand" says. Skips, saying why, where namespaces cannot be
// made (not root, no iproute2).
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process.h"
#include "tests/test_hosts.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kTrainSamples = 6000;

TEST(MultiHostTest, RolesOnFiveHostsTrainTogether) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(5);
  if (!made.ok()) GTEST_SKIP() << "cannot make test hosts in network namespaces: " << made.status();
  TestHosts& hosts = **made;
  const std::string dir = MakeTempDir("multihost");
  const std::string bin = BinDir();
  const std::string scheduler_address = hosts.address(0) + ":7000";

  // Host A: the scheduler, with every job flag.
  std::vector<std::unique_ptr<Child>> roles;
  auto start = [&](int host, const std::vector<std::string>& argv, const std::string& name) {
    absl::StatusOr<Child> child = Child::Start(hosts.Command(host, argv), dir + "/" + name + ".log");
    ASSERT_TRUE(child.ok()) << child.status();
    roles.push_back(std::make_unique<Child>(std::move(*child)));
  };
  start(0,
        {bin + "/pstrain-scheduler", "--host=0.0.0.0", "--port=7000", "--servers=2", "--workers=2", "--mode=sync",
         "--epochs=2", "--train_limit=" + std::to_string(kTrainSamples), "--test_limit=1000",
         "--summary_json=" + dir + "/summary.json"},
        "scheduler");
  // Hosts B and C: a parameter server each, on an address the workers can reach.
  for (int host : {1, 2}) {
    start(host, {bin + "/pstrain-server", "--scheduler=" + scheduler_address, "--host=" + hosts.address(host),
                 "--port=7001"},
          "server-" + std::to_string(host));
  }
  // Hosts D and E: a worker each.
  for (int host : {3, 4}) {
    start(host, {bin + "/pstrain-worker", "--scheduler=" + scheduler_address}, "worker-" + std::to_string(host));
  }

  // Every role exits 0 when the job ends.
  for (auto& role : roles) {
    absl::StatusOr<int> code = role->Wait(absl::Minutes(3));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << role->Output();
    EXPECT_EQ(*code, 0) << role->Output();
  }
  const std::string scheduler_log = roles[0]->Output();
  // The servers were reached at their hosts' addresses, not over loopback.
  EXPECT_THAT(scheduler_log, HasSubstr("at " + hosts.address(1) + ":7001")) << scheduler_log;
  EXPECT_THAT(scheduler_log, HasSubstr("at " + hosts.address(2) + ":7001")) << scheduler_log;
  const std::string summary = ReadFile(dir + "/summary.json");
  EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
  const std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 2u) << summary;
  EXPECT_EQ(samples[0], kTrainSamples) << summary;
  EXPECT_EQ(samples[1], kTrainSamples) << summary;
  EXPECT_GT(JsonNumber(summary, "final_test_accuracy"), 0.7) << summary;
}

}  // namespace
}  // namespace pstrain::testing
