// How roles start and end when an orchestrator (Kubernetes) runs them: flags from PSTRAIN_*
// environment variables, roles restarted after the job ended, the final model written by the
// scheduler, and SIGTERM. Real processes on 127.0.0.1.
#include <signal.h>
#include <stdlib.h>

#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "scheduler/client/scheduler_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

// Polls the scheduler until the job is in `state` (fails the test after 60 s).
void AwaitJobState(const std::string& address, JobState state) {
  absl::StatusOr<JobStatus> status;
  for (int i = 0; i < 600; ++i) {
    auto client = *SchedulerClient::Create(address, absl::Seconds(2));
    status = client->GetJobStatus();
    if (status.ok() && status->state() == state) return;
    absl::SleepFor(absl::Milliseconds(100));
  }
  FAIL() << "the job never became " << JobState_Name(state)
         << "; last: " << (status.ok() ? status->ShortDebugString() : status.status().ToString());
}

// Runs `argv` with `env` (NAME=VALUE) added to this process's environment.
RunResult RunWithEnv(const std::vector<std::string>& argv,
                     const std::vector<std::pair<std::string, std::string>>& env) {
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  absl::StatusOr<RunResult> r = Run(argv, absl::Seconds(60));
  for (const auto& [name, value] : env) unsetenv(name.c_str());
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : RunResult{};
}

TEST(RolesLifecycleTest, BadEnvironmentValuesAndAnUnadvertisedWildcardHostExit2) {
  const std::string server = BinDir() + "/pstrain-server";
  RunResult r = RunWithEnv({server, "--scheduler=127.0.0.1:1"}, {{"PSTRAIN_PORT", "abc"}});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("PSTRAIN_PORT='abc'"));
  EXPECT_THAT(r.output, HasSubstr("--port, expected an integer"));

  r = RunWithEnv({server}, {{"PSTRAIN_SCHEDULER", "127.0.0.1:1"}, {"PSTRAIN_HOST", "0.0.0.0"}});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--host=0.0.0.0 listens everywhere; say with --advertise_host"));

  // The command line wins over the environment; a variable that names no flag is only logged.
  r = RunWithEnv({server, "--host=127.0.0.1", "--scheduler=127.0.0.1:1", "--startup_timeout_ms=300"},
                 {{"PSTRAIN_HOST", "0.0.0.0"}, {"PSTRAIN_NOT_A_FLAG", "x"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;  // No scheduler there.
  EXPECT_THAT(r.output, HasSubstr("listening on 127.0.0.1:"));
  EXPECT_THAT(r.output, HasSubstr("ignoring the environment variable PSTRAIN_NOT_A_FLAG"));

  r = RunWithEnv({BinDir() + "/pstrain-scheduler"}, {{"PSTRAIN_WORKERS", "0"}});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--workers: got 0"));  // Given in the environment = given.
}

TEST(RolesLifecycleTest, RolesStartedAfterTheJobFinishedExit0AndTheSchedulerWroteTheModel) {
  ManualCluster cluster("late-roles");
  const std::string model_path = cluster.dir() + "/final.model";
  cluster.Start(
      1, 2,
      {"--linger_ms=30000", "--epochs=1", "--train_limit=2000", "--test_limit=500", "--final_model=" + model_path});
  for (auto& w : cluster.workers) {
    absl::StatusOr<int> code = w->Wait(absl::Seconds(120));
    ASSERT_TRUE(code.ok() && *code == 0) << w->Output();
  }
  AwaitJobState(cluster.address, FINISHED);
  // The scheduler wrote the model before it declared the job finished.
  absl::StatusOr<model::ModelFile> model = model::ReadModelFile(model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_GT(model->values.size(), 0u);
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("final model assembled from 1 shard ("));

  // Restarted roles (as a StatefulSet would) learn that the job is over and exit 0 at once; the
  // worker gets its scheduler address from the environment.
  cluster.AddServer();
  RunResult worker = RunWithEnv({BinDir() + "/pstrain-worker"}, {{"PSTRAIN_SCHEDULER", cluster.address}});
  EXPECT_EQ(worker.exit_code, 0) << worker.output;
  EXPECT_THAT(worker.output, HasSubstr("the job is over (FINISHED); nothing to do"));
  absl::StatusOr<int> server = cluster.servers.back()->Wait(absl::Seconds(30));
  EXPECT_TRUE(server.ok() && *server == 0) << cluster.servers.back()->Output();
  EXPECT_THAT(cluster.servers.back()->Output(), HasSubstr("the job is over (FINISHED); nothing to do"));

  // SIGTERM ends the linger.
  cluster.scheduler->Kill(SIGTERM);
  absl::StatusOr<int> code = cluster.scheduler->Wait(absl::Seconds(10));
  EXPECT_TRUE(code.ok() && *code == 0) << cluster.scheduler->Output();
}

TEST(RolesLifecycleTest, ARoleStartedAfterTheJobFailedExitsNonZero) {
  ManualCluster cluster("late-roles-failed");
  cluster.Start(1, 1, {"--linger_ms=30000", "--epochs=50", "--train_limit=4000", "--test_limit=200"});
  cluster.WaitForSteps(5);
  cluster.servers[0]->Kill(SIGKILL);  // No replicas, no checkpoints: the job fails.
  AwaitJobState(cluster.address, FAILED);
  absl::StatusOr<int> code = cluster.workers[0]->Wait(absl::Seconds(30));
  EXPECT_TRUE(code.ok() && *code != 0) << cluster.workers[0]->Output();

  cluster.AddWorker();
  code = cluster.workers.back()->Wait(absl::Seconds(30));
  EXPECT_TRUE(code.ok() && *code == 1) << cluster.workers.back()->Output();
  EXPECT_THAT(cluster.workers.back()->Output(), HasSubstr("the job failed before this worker joined"));
  cluster.scheduler->Kill(SIGTERM);
  code = cluster.scheduler->Wait(absl::Seconds(10));
  EXPECT_TRUE(code.ok() && *code == 1) << cluster.scheduler->Output();
}

TEST(RolesLifecycleTest, SigtermEndsAServerAndTheSchedulerPromptlyAndTheJobGoesOn) {
  ManualCluster cluster("sigterm");
  // Long enough that the job still runs when the scheduler is stopped, after the server's exit
  // (84 ms under ThreadSanitizer, 2026-12-05; 23 s and more before StopSignals took the signals
  // on its own thread, docs/testing.md, "Sanitizers").
  cluster.Start(2, 2,
                {"--replicas=2", absl::StrCat("--epochs=", 3 * kSlowdown), "--train_limit=6000", "--test_limit=500",
                 "--batch_size=32", "--state_dir=" + cluster.dir() + "/state"});
  cluster.WaitForSteps(10);
  // A server: its copy on the other server takes its shard over.
  const absl::Time server_term = absl::Now();
  cluster.servers[0]->Kill(SIGTERM);
  absl::StatusOr<int> code = cluster.servers[0]->Wait(absl::Seconds(10));
  EXPECT_TRUE(code.ok() && *code == 0) << cluster.servers[0]->Output();
  std::cerr << "server exited " << absl::FormatDuration(absl::Now() - server_term) << " after SIGTERM\n";
  // The scheduler, with --state_dir: it exits, and a restarted one goes on with the job.
  const absl::Time scheduler_term = absl::Now();
  cluster.scheduler->Kill(SIGTERM);
  code = cluster.scheduler->Wait(absl::Seconds(10));
  EXPECT_TRUE(code.ok()) << cluster.scheduler->Output();
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("the job's state stays in"));
  std::cerr << "scheduler exited " << absl::FormatDuration(absl::Now() - scheduler_term) << " after SIGTERM\n";
  cluster.RestartScheduler();
  const std::string summary = RunToEnd(cluster);
  EXPECT_THAT(summary, HasSubstr("\"final_test_accuracy\""));
}

}  // namespace
}  // namespace pstrain::testing
