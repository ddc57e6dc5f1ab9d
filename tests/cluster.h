// Runs a whole local cluster through pstrain-launch, as a user would, and reads back what it
// produced: the exit code, the output, the run summary and the final model.
#ifndef PSTRAIN_TESTS_CLUSTER_H_
#define PSTRAIN_TESTS_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "tests/process.h"

namespace pstrain::testing {

struct ClusterRun {
  int exit_code = -1;
  std::string output;
  std::string summary_json;  // Empty if the scheduler wrote none.
  std::string model_path;    // Where worker 0 wrote the final model.
};

// Runs `pstrain-launch` with `flags` plus --summary_json and --final_model in a fresh directory.
absl::StatusOr<ClusterRun> LaunchCluster(const std::string& name, const std::vector<std::string>& flags,
                                         absl::Duration timeout = absl::Minutes(5));

// A cluster started role by role (real processes), so a test knows every pid and can kill, stop
// or add roles. Logs go to one file per role in a fresh directory.
class ManualCluster {
 public:
  explicit ManualCluster(const std::string& name);

  // Starts the scheduler (with `scheduler_flags` after the defaults), then the servers and workers.
  // Heartbeats every 200 ms, a role is dead after 2 s silent, and a live worker is evicted after
  // holding the others up for 5 s (the hold-up rule: a loaded 2-core machine stalls a live worker
  // for 2 s now and then, which would change the job under test).
  // `server_flags` and `worker_flags` go to every server and worker started here.
  void Start(int servers, int workers, const std::vector<std::string>& scheduler_flags,
             const std::vector<std::string>& server_flags = {}, const std::vector<std::string>& worker_flags = {});
  // Starts the scheduler again with its first command line (after it died; with --state_dir it
  // goes on with the job). Its log goes to scheduler-restart-N.log.
  void RestartScheduler();
  // Starts one more worker (it registers with the running job), with `flags` after the defaults.
  void AddWorker(const std::vector<std::string>& flags = {});
  // Starts one more server (a replacement for a dead one takes its rank), with `flags` after the
  // defaults.
  void AddServer(const std::vector<std::string>& flags = {});
  // Waits until the job has made `steps` steps (fails the test after 60 s).
  void WaitForSteps(int64_t steps);

  const std::string& dir() const { return dir_; }
  std::string summary_path() const { return dir_ + "/summary.json"; }

  std::string address;
  std::unique_ptr<Child> scheduler;
  std::vector<std::unique_ptr<Child>> servers, workers;

 private:
  std::unique_ptr<Child> Spawn(const std::vector<std::string>& argv, const std::string& name);
  std::string dir_;
  std::vector<std::string> scheduler_argv_;
  int scheduler_restarts_ = 0;
};

// Waits for the scheduler and every worker to exit 0 (a failed wait fails the test, not the
// call) and returns the run summary.
std::string RunToEnd(ManualCluster& cluster);

// Async runs differ from one another by scheduling even with one seed, so "within `tolerance` of an
// undisturbed run" means: that close to at least one of `references` (undisturbed runs of the
// same job).
::testing::AssertionResult NearAnyReference(double accuracy, const std::vector<double>& references, double tolerance);

// Largest relative difference ||a - b|| / ||a|| over the tensors of two model files.
double MaxRelativeDifference(const model::ModelFile& a, const model::ModelFile& b);

}  // namespace pstrain::testing

#endif  // PSTRAIN_TESTS_CLUSTER_H_
