#include "tests/cluster.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "tests/process.h"

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
