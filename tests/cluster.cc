#include "tests/cluster.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/process.h"

#include "scheduler/client/scheduler_client.h"
#include "gtest/gtest.h"

namespace pstrain::testing {

absl::StatusOr<ClusterRun> LaunchCluster(const std::string& name, const std::vector<std::string>& flags,
                                         absl::Duration timeout) {
  std::string dir = MakeTempDir(name);
  ClusterRun run;
  run.model_path = dir + "/model.bin";
  std::string summary_path = dir + "/summary.json";
  std::vector<std::string> argv = {BinDir() + "/pstrain-launch", "--summary_json=" + summary_path,
                                   "--final_model=" + run.model_path};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<RunResult> result = Run(argv, timeout);
  if (!result.ok()) return result.status();
  run.exit_code = result->exit_code;
  run.output = result->output;
  run.summary_json = ReadFile(summary_path);
  return run;
}

ManualCluster::ManualCluster(const std::string& name) : dir_(MakeTempDir(name)) {}

void ManualCluster::Start(int servers, int workers, const std::vector<std::string>& scheduler_flags,
                          const std::vector<std::string>& server_flags, const std::vector<std::string>& worker_flags) {
  std::string port_file = dir_ + "/scheduler.port";
  std::vector<std::string> argv = {BinDir() + "/pstrain-scheduler",
                                   "--port=0",
                                   "--port_file=" + port_file,
                                   "--summary_json=" + summary_path(),
                                   "--servers=" + std::to_string(servers),
                                   "--workers=" + std::to_string(workers),
                                   "--heartbeat_ms=200",
                                   MillisFlag("dead_after_ms", 2000),
                                   MillisFlag("hold_up_after_ms", 5000)};
  argv.insert(argv.end(), scheduler_flags.begin(), scheduler_flags.end());
  scheduler_argv_ = argv;
  scheduler = Spawn(argv, "scheduler");
  std::string port;
  for (int i = 0; i < 300 * kSlowdown && port.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    port = std::string(absl::StripAsciiWhitespace(ReadFile(port_file)));
  }
  ASSERT_FALSE(port.empty()) << scheduler->Output();
  address = absl::StrCat("127.0.0.1:", port);
  for (int i = 0; i < servers; ++i) AddServer(server_flags);
  for (int i = 0; i < workers; ++i) AddWorker(worker_flags);
}

void ManualCluster::RestartScheduler() {
  scheduler = Spawn(scheduler_argv_, absl::StrCat("scheduler-restart-", ++scheduler_restarts_));
}

void ManualCluster::AddServer(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinDir() + "/pstrain-server", "--scheduler=" + address, "--port=0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  servers.push_back(Spawn(argv, absl::StrCat("server", servers.size())));
}

void ManualCluster::AddWorker(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinDir() + "/pstrain-worker", "--scheduler=" + address, "--rpc_timeout_ms=60000"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  workers.push_back(Spawn(argv, absl::StrCat("worker", workers.size())));
}

void ManualCluster::WaitForSteps(int64_t steps) {
  absl::StatusOr<JobStatus> status;
  for (int i = 0; i < 1200 * kSlowdown; ++i) {
    // A fresh client each time: a channel whose first attempts found no scheduler (one being
    // restarted) may keep failing fast for a while after it is back.
    auto client = *SchedulerClient::Create(address, absl::Seconds(2));
    status = client->GetJobStatus();
    if (status.ok() && status->step() >= steps) return;
    absl::SleepFor(absl::Milliseconds(50));
  }
  FAIL() << "the job never reached step " << steps
         << " (last status: " << (status.ok() ? status->ShortDebugString() : status.status().ToString()) << ")\n"
         << scheduler->Output();
}

std::unique_ptr<Child> ManualCluster::Spawn(const std::vector<std::string>& argv, const std::string& name) {
  auto child = Child::Start(argv, dir_ + "/" + name + ".log");
  EXPECT_TRUE(child.ok()) << child.status();
  return std::make_unique<Child>(*child);
}

std::string RunToEnd(ManualCluster& cluster) {
  absl::StatusOr<int> code = cluster.scheduler->Wait(absl::Seconds(120));
  EXPECT_TRUE(code.ok() && *code == 0) << cluster.scheduler->Output();
  for (auto& w : cluster.workers) {
    absl::StatusOr<int> wc = w->Wait(absl::Seconds(30));
    EXPECT_TRUE(wc.ok() && *wc == 0) << w->Output();
  }
  return ReadFile(cluster.summary_path());
}

::testing::AssertionResult NearAnyReference(double accuracy, const std::vector<double>& references, double tolerance) {
  for (double reference : references) {
    if (std::abs(accuracy - reference) <= tolerance) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "accuracy " << accuracy << " is not within " << tolerance
                                       << " of any undisturbed run [" << absl::StrJoin(references, ", ") << "]";
}

double MaxRelativeDifference(const model::ModelFile& a, const model::ModelFile& b) {
  if (a.params.size() != b.params.size() || a.values.size() != b.values.size()) return INFINITY;
  double worst = 0;
  for (const model::ParamSpec& p : a.params) {
    double diff = 0, norm = 0;
    for (int64_t i = p.flat_offset; i < p.flat_offset + p.num_elements; ++i) {
      double d = double{a.values[i]} - double{b.values[i]};
      diff += d * d;
      norm += double{a.values[i]} * a.values[i];
    }
    double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    worst = std::max(worst, rel);
  }
  return worst;
}

}  // namespace pstrain::testing
