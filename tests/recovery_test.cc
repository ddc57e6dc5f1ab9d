// A parameter server killed with SIGKILL mid-training and replaced: every server rolls back to the
// newest consistent checkpoint, the workers rewind to it, and the job finishes as if nothing had
// happened (SYNC mode).
#include <signal.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::AnyOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

std::vector<std::string> Job(const std::string& checkpoint_dir) {
  return {"--mode=sync",
          "--epochs=3",
          "--train_limit=12000",
          "--test_limit=2000",
          "--batch_size=32",
          "--seed=9",
          "--checkpoint_dir=" + checkpoint_dir,
          "--checkpoint_every_steps=25",
          "--server_recovery_timeout_ms=30000"};
}

TEST(RecoveryTest, KilledServerIsReplacedAndTheJobRollsBackToACheckpoint) {
  ManualCluster reference("recovery-reference");
  reference.Start(2, 2, Job(MakeTempDir("ckpt-reference")));
  const double undisturbed = JsonNumber(RunToEnd(reference), "final_test_accuracy");

  ManualCluster cluster("recovery");
  cluster.Start(2, 2, Job(MakeTempDir("ckpt")));
  cluster.WaitForSteps(120);
  cluster.servers[1]->Kill(SIGKILL);
  absl::SleepFor(absl::Milliseconds(300));
  cluster.AddServer();  // The replacement takes the dead server's rank and restores its checkpoint.
  std::string summary = RunToEnd(cluster);
  std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 3u) << summary;
  for (int e = 0; e < 3; ++e) EXPECT_EQ(samples[e], 12000) << "epoch " << e << "\n" << summary;
  // Ranks follow registration order, so the killed process may hold either rank.
  EXPECT_THAT(summary, ContainsRegex("\"role\": *\"server\", *\"rank\": *[01], *\"kind\": *\"died\""));
  EXPECT_THAT(summary, ContainsRegex("\"role\": *\"server\", *\"rank\": *[01], *\"kind\": *\"joined\""));
  EXPECT_NEAR(JsonNumber(summary, "final_test_accuracy"), undisturbed, 0.005) << summary;
  // The servers went back to the newest common checkpoint, and the workers with them: they rewind,
  // unless the kill landed right after that checkpoint's step (then they learn of the rollback at
  // that very step, nothing is redone, and the sample counts above show that nothing was lost).
  const std::string scheduler_log = cluster.scheduler->Output();
  std::smatch restore;
  ASSERT_TRUE(std::regex_search(scheduler_log, restore, std::regex(R"(servers restore the checkpoints of step (\d+))")))
      << scheduler_log;
  const std::string restore_step = restore[1].str();
  std::string workers = cluster.workers[0]->Output() + cluster.workers[1]->Output();
  EXPECT_THAT(workers, AnyOf(HasSubstr("rewinding"), HasSubstr("step " + restore_step + ": membership epoch")));
}

// ASYNC and SSP servers checkpoint at their own update counts: the replacement restores only its
// own newest checkpoint (losing its shard's updates since then), the other server and the workers
// go on, and the workers push the batch the dead server missed again.
class AsyncRecoveryTest : public ::testing::TestWithParam<const char*> {};

TEST_P(AsyncRecoveryTest, KilledServerIsReplacedAndRestoresOnlyItsOwnCheckpoint) {
  // Evaluated on the whole test set: async runs differ from one another by scheduling, so a finer
  // accuracy measure keeps the 0.5-point comparison meaningful.
  const std::vector<std::string> in_mode = {std::string("--mode=") + GetParam(), "--test_limit=10000",
                                            "--lease_batches=8"};
  std::vector<double> undisturbed;
  for (int run = 0; run < 2; ++run) {
    std::vector<std::string> job = Job(MakeTempDir("ckpt-async-reference"));
    job.insert(job.end(), in_mode.begin(), in_mode.end());
    ManualCluster reference(std::string("recovery-reference-") + GetParam());
    reference.Start(2, 2, job);
    undisturbed.push_back(JsonNumber(RunToEnd(reference), "final_test_accuracy"));
  }

  std::vector<std::string> job = Job(MakeTempDir("ckpt-async"));
  job.insert(job.end(), in_mode.begin(), in_mode.end());
  ManualCluster cluster(std::string("recovery-") + GetParam());
  cluster.Start(2, 2, job);
  cluster.WaitForSteps(150);
  cluster.servers[1]->Kill(SIGKILL);
  absl::SleepFor(absl::Milliseconds(300));
  cluster.AddServer();
  std::string summary = RunToEnd(cluster);
  std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 3u) << summary;
  for (int e = 0; e < 3; ++e) EXPECT_EQ(samples[e], 12000) << "epoch " << e << "\n" << summary;
  EXPECT_THAT(summary, ContainsRegex("\"role\": *\"server\", *\"rank\": *[01], *\"kind\": *\"joined\""));
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("restores its checkpoint of step"));
  EXPECT_THAT(cluster.servers[2]->Output(), HasSubstr("rolling back to step"));
  // The replaced shard lost its updates since its checkpoint: the guarantee is that this costs no
  // more than 0.5 points. Async and SSP runs differ by scheduling, and a disturbed run has come out
  // 0.5 points BETTER than both undisturbed ones, so the check is one-sided, with a loose upper
  // bound that still catches a broken accuracy figure.
  const double accuracy = JsonNumber(summary, "final_test_accuracy");
  const auto [worst, best] = std::minmax_element(undisturbed.begin(), undisturbed.end());
  EXPECT_GE(accuracy, *worst - 0.005) << summary;
  EXPECT_LE(accuracy, *best + 0.02) << summary;
  for (auto& w : cluster.workers) EXPECT_THAT(w->Output(), ::testing::Not(HasSubstr("rewinding")));
}

INSTANTIATE_TEST_SUITE_P(Modes, AsyncRecoveryTest, ::testing::Values("async", "ssp"));

TEST(RecoveryTest, KilledServerWithoutReplacementFailsTheJobAfterTheTimeout) {
  ManualCluster cluster("no-replacement");
  std::vector<std::string> job = Job(MakeTempDir("ckpt-none"));
  job.push_back("--epochs=30");
  job.push_back("--server_recovery_timeout_ms=3000");
  cluster.Start(2, 2, job);
  cluster.WaitForSteps(60);
  cluster.servers[0]->Kill(SIGKILL);
  absl::StatusOr<int> code = cluster.scheduler->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << cluster.scheduler->Output();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("replacement"));
  for (auto& w : cluster.workers) {
    absl::StatusOr<int> wc = w->Wait(absl::Seconds(30));
    ASSERT_TRUE(wc.ok()) << "a worker hangs after the job failed:\n" << w->Output();
    EXPECT_NE(*wc, 0);
  }
}

TEST(RecoveryTest, LauncherRestartsAKilledServerAndTheJobFinishes) {
  const std::string dir = MakeTempDir("launch-recovery");
  std::vector<std::string> argv = {BinDir() + "/pstrain-launch",
                                   "--servers=2",
                                   "--workers=2",
                                   "--max_restarts=1",
                                   "--heartbeat_ms=200",
                                   MillisFlag("dead_after_ms", 2000),
                                   "--summary_json=" + dir + "/summary.json"};
  for (const std::string& flag : Job(dir)) {
    // A scheduler flag, not a job flag: the launcher's scheduler keeps its default (60 s).
    if (flag.rfind("--server_recovery_timeout_ms", 0) != 0) argv.push_back(flag);
  }
  argv.push_back("--epochs=8");
  absl::StatusOr<Child> launcher = Child::Start(argv, dir + "/launch.log");
  ASSERT_TRUE(launcher.ok());
  std::vector<pid_t> servers;
  for (int i = 0; i < 600 && servers.size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    servers = ChildrenNamed(launcher->pid(), "pstrain-server");
  }
  ASSERT_EQ(servers.size(), 2u) << launcher->Output();
  // Training and checkpoints under way (a fixed sleep was not enough on a loaded machine: the kill
  // could land before the server's first heartbeat, and the scheduler never counted it).
  for (int i = 0; i < 1200 && launcher->Output().find("wrote checkpoint") == std::string::npos; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_THAT(launcher->Output(), HasSubstr("wrote checkpoint"));
  kill(servers[1], SIGKILL);
  absl::StatusOr<int> code = launcher->Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << launcher->Output();
  EXPECT_EQ(*code, 0) << launcher->Output();
  EXPECT_THAT(launcher->Output(), HasSubstr("restarting (1 of 1)"));
  const std::string summary = ReadFile(dir + "/summary.json");
  std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 8u) << summary;
  for (int e = 0; e < 8; ++e) EXPECT_EQ(samples[e], 12000) << "epoch " << e << "\n" << summary;
  EXPECT_THAT(summary, ContainsRegex("\"role\": *\"server\", *\"rank\": *[01], *\"kind\": *\"joined\""));
}

}  // namespace
}  // namespace pstrain::testing
