// Pushing layer by layer during backward (JobSpec.overlap) changes when bytes move, never what is
// computed: runs with and without it end with the same model bit for bit, also for the CNN with a
// live copy of every shard (partial pushes to the backup too), and the run summary shows the
// step-time split with the overlapped time.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

struct Result {
  std::vector<float> model;
  std::string summary;
};

Result Train(const std::string& name, const std::vector<std::string>& flags) {
  absl::StatusOr<ClusterRun> run = LaunchCluster(name, flags);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {};
  EXPECT_EQ(run->exit_code, 0) << run->output;
  absl::StatusOr<model::ModelFile> file = model::ReadModelFile(run->model_path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return {};
  return {file->values, run->summary_json};
}

// The run's mean overlapped milliseconds per step (step_time_ms.overlapped of the whole run, the
// last one in the summary).
double Overlapped(const std::string& summary) {
  const std::vector<double> all = JsonNumbers(summary, "overlapped");
  return all.empty() ? -1 : all.back();
}

TEST(OverlapTest, MlpModelIsTheSameWithAndWithoutOverlap) {
  // Hidden layers large enough that fc2's gradient (512 KiB) goes out in a part of its own before
  // fc1's backward, so each step has several parts per shard.
  const std::vector<std::string> job = {"--mode=sync",       "--servers=2",      "--workers=2",
                                        "--epochs=1",        "--hidden=512,256", "--train_limit=6000",
                                        "--test_limit=1000", "--batch_size=32"};
  std::vector<std::string> off = job;
  off.push_back("--overlap=false");
  const Result with = Train("overlap-on", job);
  const Result without = Train("overlap-off", off);
  ASSERT_FALSE(with.model.empty());
  EXPECT_EQ(with.model, without.model);
  // The split is reported; only the overlapping run had pushes in flight during compute.
  EXPECT_THAT(with.summary, ::testing::HasSubstr("\"step_time_ms\": {\"steps\": "));
  EXPECT_GT(Overlapped(with.summary), 0) << with.summary;
  EXPECT_EQ(Overlapped(without.summary), 0) << without.summary;
}

TEST(OverlapTest, CnnWithReplicasIsTheSameWithAndWithoutOverlap) {
  const std::vector<std::string> job = {"--model=cnn", "--mode=sync",       "--servers=2",      "--workers=2",
                                        "--epochs=1",  "--train_limit=768", "--test_limit=256", "--batch_size=32"};
  std::vector<std::string> replicated = job;
  replicated.push_back("--replicas=2");
  std::vector<std::string> off = job;
  off.push_back("--overlap=false");
  const Result with = Train("overlap-cnn-replicas", replicated);
  const Result without = Train("overlap-cnn-off", off);
  ASSERT_FALSE(with.model.empty());
  EXPECT_EQ(with.model, without.model);
  EXPECT_GT(Overlapped(with.summary), 0) << with.summary;
}

}  // namespace
}  // namespace pstrain::testing
