// pstrain-eval on the model a real cluster trained: it counts every test sample the way the workers
// did at the end of the run, so its accuracy is the run summary's final_test_accuracy.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

// The number after "key=" in pstrain-eval's machine-readable line; NaN if absent.
double EvalNumber(const std::string& output, const std::string& key) {
  const size_t at = output.find(key + "=");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(output.c_str() + at + key.size() + 1, nullptr);
}

RunResult Eval(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinDir() + "/pstrain-eval"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<RunResult> r = Run(argv, absl::Seconds(120));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : RunResult{};
}

TEST(EvalTest, CnnTrainsOnTheClusterAndItsModelFileEvaluatesTheSame) {
  // --model=cnn end to end on a subset: servers shard the CNN's tensors like the MLP's, workers
  // train it, worker 0 writes it, and pstrain-eval recognises and rebuilds it from the file.
  absl::StatusOr<ClusterRun> run =
      LaunchCluster("eval-cnn", {"--model=cnn", "--servers=2", "--workers=2", "--epochs=1", "--train_limit=3072",
                                 "--test_limit=1000", "--batch_size=32", "--seed=3"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->output;
  const double summary_accuracy = JsonNumber(run->summary_json, "final_test_accuracy");
  // One epoch on 3072 samples: far past chance (10%), far from converged.
  EXPECT_GT(summary_accuracy, 0.6) << run->summary_json;
  RunResult r = Eval({"--model=" + run->model_path, "--test_limit=1000"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NEAR(EvalNumber(r.output, "test_accuracy"), summary_accuracy, 1e-9) << r.output;
}

TEST(EvalTest, AccuracyOfTheFinalModelEqualsTheRunSummary) {
  absl::StatusOr<ClusterRun> run = LaunchCluster(
      "eval", {"--servers=2", "--workers=2", "--epochs=1", "--train_limit=4096", "--test_limit=2000", "--seed=3"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->output;
  const double summary_accuracy = JsonNumber(run->summary_json, "final_test_accuracy");
  ASSERT_TRUE(std::isfinite(summary_accuracy)) << run->summary_json;

  RunResult r = Eval({"--model=" + run->model_path, "--test_limit=2000"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(EvalNumber(r.output, "samples"), 2000) << r.output;
  EXPECT_NEAR(EvalNumber(r.output, "test_accuracy"), summary_accuracy, 1e-9) << r.output;
  // The loss sums the same per-sample terms in another order (two worker slices, then the
  // scheduler's sum), so it agrees to rounding, not bitwise.
  EXPECT_NEAR(EvalNumber(r.output, "test_loss"), JsonNumber(run->summary_json, "final_test_loss"), 1e-5) << r.output;
  // One epoch on 4096 samples trains well past chance (10%), so the comparison is not of two zeros.
  EXPECT_GT(summary_accuracy, 0.3);
}

TEST(EvalTest, BadFlagsAndBadFilesExitWithTheirCodes) {
  RunResult r = Eval({});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--model"));

  const std::string absent = MakeTempDir("eval-absent") + "/no-such.model";
  r = Eval({"--model=" + absent});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(absent));
}

}  // namespace
}  // namespace pstrain::testing
