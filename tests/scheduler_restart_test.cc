// The scheduler killed with SIGKILL mid-epoch and started again with the same flags
// (--state_dir): the roles ride out the outage, the restarted scheduler goes on from its saved
// state, and the job finishes as if nothing had happened: every training sample counted exactly
// once per epoch, no step applied twice, the same accuracy as an undisturbed run of the same seed
// (in SYNC mode the very same model, since nothing is recomputed).
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/job_credentials.h"
#include "scheduler/client/scheduler_client.h"
#include "transport/transport_security.h"
#include "model/model_file.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kEpochs = 3;
constexpr int64_t kTrainSamples = 12000;

// Evaluated on the whole test set, at a learning rate at which undisturbed async runs of this job
// land within about 0.3 points of one another (they differ by scheduling), so the 0.5-point
// comparison means something.
std::vector<std::string> Job(const std::string& mode, const std::string& dir) {
  return {"--mode=" + mode,     "--epochs=3",        "--train_limit=12000",
          "--test_limit=10000", "--batch_size=32",   "--seed=5",
          "--lr=0.001",         "--lease_batches=8", "--final_model=" + dir + "/model.bin"};
}

// Waits for every role to exit 0; returns the run summary.
std::string ExpectJobFinished(ManualCluster& cluster) {
  absl::StatusOr<int> code = cluster.scheduler->Wait(absl::Seconds(120));
  EXPECT_TRUE(code.ok() && *code == 0) << cluster.scheduler->Output();
  for (auto* group : {&cluster.workers, &cluster.servers}) {
    for (auto& role : *group) {
      absl::StatusOr<int> rc = role->Wait(absl::Seconds(60));
      EXPECT_TRUE(rc.ok() && *rc == 0) << role->Output();
    }
  }
  const std::string summary = ReadFile(cluster.summary_path());
  EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
  std::vector<double> samples = JsonNumbers(summary, "samples");
  EXPECT_GE(samples.size(), static_cast<size_t>(kEpochs)) << summary;
  for (int e = 0; e < kEpochs && e < static_cast<int>(samples.size()); ++e) {
    EXPECT_EQ(samples[e], kTrainSamples) << "epoch " << e << "\n" << summary;
  }
  return summary;
}

class SchedulerRestartTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerRestartTest, KilledSchedulerIsRestartedAndTheJobGoesOn) {
  const std::string mode = GetParam();
  ManualCluster reference("restart-reference-" + mode);
  reference.Start(2, 2, Job(mode, reference.dir()));
  const std::string undisturbed = ExpectJobFinished(reference);

  ManualCluster cluster("restart-" + mode);
  std::vector<std::string> flags = Job(mode, cluster.dir());
  flags.push_back("--state_dir=" + cluster.dir() + "/state");
  cluster.Start(2, 2, flags);
  // Killed twice, in different epochs (the job has 564 sync steps, 1125 async batches), well before
  // the end; the second restart restores what the first restored scheduler saved.
  const std::vector<int64_t> kill_at = mode == "sync" ? std::vector<int64_t>{120, 350} : std::vector<int64_t>{250, 650};
  for (size_t i = 0; i < kill_at.size(); ++i) {
    cluster.WaitForSteps(kill_at[i]);
    cluster.scheduler->Kill(SIGKILL);
    ASSERT_TRUE(cluster.scheduler->Wait(absl::Seconds(10)).ok());
    EXPECT_THAT(cluster.scheduler->Output(), ::testing::Not(HasSubstr("job FINISHED")))
        << "killed too late to test anything";
    absl::SleepFor(absl::Milliseconds(1500));  // The roles keep going, or wait, without it.
    cluster.RestartScheduler();
  }
  const std::string summary = ExpectJobFinished(cluster);
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("restored the scheduler state (restart 2): job RUNNING"));
  // Nobody was declared dead: the restart gave every role a fresh dead_after.
  EXPECT_THAT(summary, ::testing::Not(HasSubstr("\"died\""))) << summary;

  const double accuracy = JsonNumber(summary, "final_test_accuracy");
  const double reference_accuracy = JsonNumber(undisturbed, "final_test_accuracy");
  std::vector<double> references = {reference_accuracy};
  if (mode != "sync") {  // Async runs differ by scheduling: compare with a second undisturbed run too.
    ManualCluster second("restart-reference2-" + mode);
    second.Start(2, 2, Job(mode, second.dir()));
    references.push_back(JsonNumber(ExpectJobFinished(second), "final_test_accuracy"));
  }
  EXPECT_TRUE(NearAnyReference(accuracy, references, 0.005)) << summary;
  absl::StatusOr<model::ModelFile> model = model::ReadModelFile(cluster.dir() + "/model.bin");
  absl::StatusOr<model::ModelFile> reference_model = model::ReadModelFile(reference.dir() + "/model.bin");
  ASSERT_TRUE(model.ok() && reference_model.ok()) << model.status() << reference_model.status();
  if (mode == "sync") {
    // Every step applied exactly once, in the same order: the same model bit for bit.
    EXPECT_EQ(MaxRelativeDifference(*reference_model, *model), 0.0);
    EXPECT_EQ(accuracy, reference_accuracy);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SchedulerRestartTest, ::testing::Values("sync", "async"));

TEST(SchedulerRestartLaunchTest, LauncherRestartsAKilledSchedulerAndTheJobFinishes) {
  const std::string dir = MakeTempDir("launch-scheduler-restart");
  std::vector<std::string> argv = {BinDir() + "/pstrain-launch",
                                   "--servers=2",
                                   "--workers=2",
                                   "--max_restarts=1",
                                   "--heartbeat_ms=200",
                                   MillisFlag("dead_after_ms", 2000),
                                   "--summary_json=" + dir + "/summary.json",
                                   "--mode=sync",
                                   "--epochs=6",
                                   "--train_limit=12000",
                                   "--test_limit=2000",
                                   "--batch_size=32",
                                   "--seed=3"};
  // The job's credentials, given to the launcher, so the test can ask the (restarted) scheduler
  // too: every role keeps its TLS across a restart.
  std::filesystem::create_directories(dir + "/tls");
  absl::StatusOr<JobCredentials> credentials = MakeJobCredentials(dir + "/tls");
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  argv.push_back("--tls_dir=" + credentials->dir);  // Each role gets its own certificate.
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> security =
      TransportSecurity::Create(credentials->For(CertRole::kOperator));
  ASSERT_TRUE(security.ok()) << security.status();
  absl::StatusOr<Child> launcher = Child::Start(argv, dir + "/launch.log");
  ASSERT_TRUE(launcher.ok());
  // "[launch] scheduler listening on 127.0.0.1:PORT; ..."
  std::smatch port;
  const std::regex listening("scheduler listening on (127\\.0\\.0\\.1:[0-9]+);");
  std::string output;
  for (int i = 0; i < 600 && !std::regex_search(output, port, listening); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    output = launcher->Output();
  }
  ASSERT_FALSE(port.empty()) << output;
  const std::string address = port[1].str();
  int64_t step = 0;
  for (int i = 0; i < 1200 && step < 300; ++i) {  // Into epoch 1 of 6 (188 steps each).
    absl::SleepFor(absl::Milliseconds(50));
    absl::StatusOr<JobStatus> status = (*SchedulerClient::Create(address, absl::Seconds(2), *security))->GetJobStatus();
    if (status.ok()) step = status->step();
  }
  ASSERT_GE(step, 300) << launcher->Output();
  std::vector<pid_t> schedulers = ChildrenNamed(launcher->pid(), "pstrain-scheduler");
  ASSERT_EQ(schedulers.size(), 1u) << launcher->Output();
  kill(schedulers[0], SIGKILL);
  absl::StatusOr<int> code = launcher->Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << launcher->Output();
  EXPECT_EQ(*code, 0) << launcher->Output();
  EXPECT_THAT(launcher->Output(), HasSubstr("scheduler died"));
  EXPECT_THAT(launcher->Output(), HasSubstr("restored the scheduler state"));
  const std::string summary = ReadFile(dir + "/summary.json");
  EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
  std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 6u) << summary;
  EXPECT_THAT(summary, ::testing::Not(HasSubstr("\"died\""))) << summary;
  for (int e = 0; e < 6; ++e) EXPECT_EQ(samples[e], kTrainSamples) << "epoch " << e << "\n" << summary;
}

TEST(SchedulerStateFileTest, DamagedOrForeignStateIsRefusedWithAPreciseError) {
  const std::string dir = MakeTempDir("bad-state");
  const std::vector<std::string> job = {BinDir() + "/pstrain-scheduler",
                                        "--state_dir=" + dir + "/state",
                                        "--port_file=" + dir + "/port",
                                        "--train_limit=1000",
                                        "--test_limit=100",
                                        "--epochs=2"};
  // A scheduler saves its state as soon as it listens; kill it then.
  absl::StatusOr<Child> first = Child::Start(job, dir + "/first.log");
  ASSERT_TRUE(first.ok());
  for (int i = 0; i < 300 && ReadFile(dir + "/port").empty(); ++i) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_FALSE(ReadFile(dir + "/port").empty()) << first->Output();
  first->Kill(SIGKILL);
  ASSERT_TRUE(first->Wait(absl::Seconds(10)).ok());

  std::vector<std::string> other = job;
  other.back() = "--epochs=3";
  absl::StatusOr<RunResult> refused = testing::Run(other, absl::Seconds(30));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->exit_code, 1) << refused->output;
  EXPECT_THAT(refused->output, HasSubstr("it is of another job"));
  EXPECT_THAT(refused->output, HasSubstr("epochs: 2 -> 3"));

  std::string bytes = ReadFile(dir + "/state/scheduler.state");
  ASSERT_GT(bytes.size(), 30u);
  bytes[bytes.size() / 2] ^= 0x40;
  {
    std::ofstream out(dir + "/state/scheduler.state", std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  absl::StatusOr<RunResult> damaged = testing::Run(job, absl::Seconds(30));
  ASSERT_TRUE(damaged.ok()) << damaged.status();
  EXPECT_EQ(damaged->exit_code, 1) << damaged->output;
  EXPECT_THAT(damaged->output, HasSubstr("scheduler.state"));
  EXPECT_THAT(damaged->output, HasSubstr("the file is damaged"));
}

}  // namespace
}  // namespace pstrain::testing
