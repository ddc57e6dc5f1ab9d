// Failures this issue must handle cleanly (surviving them is the churn issue's work): a role that
// dies makes the whole job stop with a clear message within a deadline, never a hang.
#include <dirent.h>
#include <signal.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/client/scheduler_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kLongJob = {"--epochs=200", "--train_limit=8192", "--test_limit=256", "--batch_size=32",
                                           "--eval_last_epoch_only"};

TEST(FailureTest, KilledServerStopsTheJobWithAClearErrorInsteadOfHanging) {
  ManualCluster cluster("killed-server");
  cluster.Start(2, 2, kLongJob);
  cluster.WaitForSteps(20);
  cluster.servers[1]->Kill(SIGKILL);

  for (auto& worker : cluster.workers) {
    absl::StatusOr<int> code = worker->Wait(absl::Seconds(20));
    ASSERT_TRUE(code.ok()) << "worker hangs after a server died:\n" << worker->Output();
    EXPECT_NE(*code, 0);
  }
  absl::StatusOr<int> code = cluster.scheduler->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << cluster.scheduler->Output();
  EXPECT_EQ(*code, 1);
  code = cluster.servers[0]->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << cluster.servers[0]->Output();
  EXPECT_NE(*code, 0);
  // Someone names the dead server.
  std::string all = cluster.scheduler->Output() + cluster.workers[0]->Output() + cluster.workers[1]->Output();
  EXPECT_THAT(all, HasSubstr("server 1"));
}

TEST(FailureTest, KilledSchedulerMakesEveryRoleExitWithinTheDeadline) {
  ManualCluster cluster("killed-scheduler");
  cluster.Start(1, 2, kLongJob);
  cluster.WaitForSteps(20);
  cluster.scheduler->Kill(SIGKILL);
  for (auto* group : {&cluster.servers, &cluster.workers}) {
    for (auto& role : *group) {
      absl::StatusOr<int> code = role->Wait(absl::Seconds(30));
      ASSERT_TRUE(code.ok()) << "a role hangs after the scheduler died:\n" << role->Output();
      EXPECT_NE(*code, 0);
      EXPECT_THAT(role->Output(), HasSubstr("scheduler"));
    }
  }
}

TEST(FailureTest, KilledWorkerBelowMinWorkersFailsTheJobInsteadOfHanging) {
  ManualCluster cluster("killed-worker");
  std::vector<std::string> flags = kLongJob;
  flags.push_back("--min_workers=2");
  cluster.Start(1, 2, flags);
  cluster.WaitForSteps(20);
  cluster.workers[0]->Kill(SIGKILL);
  absl::StatusOr<int> code = cluster.workers[1]->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << cluster.workers[1]->Output();
  EXPECT_NE(*code, 0);
  code = cluster.scheduler->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("--min_workers"));
}

TEST(FailureTest, LauncherExitsNonZeroWhenAServerIsKilled) {
  std::string dir = MakeTempDir("launcher-kill");
  std::vector<std::string> argv = {BinDir() + "/pstrain-launch", "--servers=2", "--workers=2", "--heartbeat_ms=200",
                                   MillisFlag("dead_after_ms", 2000)};
  argv.insert(argv.end(), kLongJob.begin(), kLongJob.end());
  auto launcher = Child::Start(argv, dir + "/launch.log");
  ASSERT_TRUE(launcher.ok());
  std::vector<pid_t> servers;
  for (int i = 0; i < 600 && servers.size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    servers = ChildrenNamed(launcher->pid(), "pstrain-server");
  }
  ASSERT_EQ(servers.size(), 2u) << launcher->Output();
  absl::SleepFor(Scaled(absl::Seconds(3)));  // Let training start.
  kill(servers[0], SIGKILL);
  absl::StatusOr<int> code = launcher->Wait(absl::Seconds(40));
  ASSERT_TRUE(code.ok()) << "launcher hangs after a server died:\n" << launcher->Output();
  EXPECT_NE(*code, 0);
  EXPECT_THAT(launcher->Output(), HasSubstr("server"));
  EXPECT_TRUE(ChildrenNamed(launcher->pid(), "pstrain-").empty());
}

}  // namespace
}  // namespace pstrain::testing
