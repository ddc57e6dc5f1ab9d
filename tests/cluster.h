// Runs a whole local cluster through pstrain-launch, as a user would, and reads back what it
// produced: the exit code, the output, the run summary and the final model.
#ifndef PSTRAIN_TESTS_CLUSTER_H_
#define PSTRAIN_TESTS_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/model_file.h"

namespace pstrain::testing {

struct ClusterRun {
  int exit_code = -1;
  std::string output;
  std::string summary_json;   // Empty if the scheduler wrote none.
  std::string model_path;     // Where worker 0 wrote the final model.
};

// Runs `pstrain-launch` with `flags` plus --summary_json and --final_model in a fresh directory.
absl::StatusOr<ClusterRun> LaunchCluster(const std::string& name, const std::vector<std::string>& flags,
                                         absl::Duration timeout = absl::Minutes(5));

// Largest relative difference ||a - b|| / ||a|| over the tensors of two model files.
double MaxRelativeDifference(const model::ModelFile& a, const model::ModelFile& b);

}  // namespace pstrain::testing

#endif  // PSTRAIN_TESTS_CLUSTER_H_
