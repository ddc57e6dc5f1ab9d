// Synchronous training on a real local cluster: every role its own process, gRPC over 127.0.0.1.
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

// A short job: 20 sync steps on a subset, plain momentum SGD.
std::vector<std::string> ShortJob(int servers, int workers, int batch) {
  return {"--servers=" + std::to_string(servers),
          "--workers=" + std::to_string(workers),
          "--batch_size=" + std::to_string(batch),
          "--mode=sync",
          "--epochs=1",
          "--max_steps=20",
          "--train_limit=4096",
          "--test_limit=1000",
          "--optimizer=momentum",
          "--lr=0.05",
          "--seed=7"};
}

model::ModelFile RunAndReadModel(const std::string& name, const std::vector<std::string>& flags,
                                 std::string* summary = nullptr) {
  absl::StatusOr<ClusterRun> run = LaunchCluster(name, flags);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {};
  EXPECT_EQ(run->exit_code, 0) << run->output;
  absl::StatusOr<model::ModelFile> file = model::ReadModelFile(run->model_path);
  EXPECT_TRUE(file.ok()) << file.status() << "\n" << run->output;
  if (summary != nullptr) *summary = run->summary_json;
  return file.ok() ? *file : model::ModelFile{};
}

TEST(SyncClusterTest, TwoWorkersOfSixteenTrainLikeOneWorkerOfThirtyTwo) {
  model::ModelFile two = RunAndReadModel("two-by-16", ShortJob(2, 2, 16));
  model::ModelFile one = RunAndReadModel("one-by-32", ShortJob(2, 1, 32));
  ASSERT_FALSE(two.values.empty());
  ASSERT_EQ(two.values.size(), one.values.size());
  const double difference = MaxRelativeDifference(one, two);
  std::cout << "max relative difference, 2x16 vs 1x32: " << difference << "\n";
  EXPECT_LE(difference, 1e-5);
  // Float rounding differs between the two (sums in a different order), so the runs are close,
  // not equal; equal would mean the test compared a run with itself.
  EXPECT_GT(difference, 0.0);
  // Twenty steps moved the weights well beyond that tolerance: a run of one step differs by far more.
  std::vector<std::string> one_step = ShortJob(2, 2, 16);
  one_step.push_back("--max_steps=1");
  model::ModelFile early = RunAndReadModel("one-step", one_step);
  EXPECT_GT(MaxRelativeDifference(early, two), 1e-2);
}

TEST(SyncClusterTest, SameSeedAndShapeRepeatBitwise) {
  std::string summary_a, summary_b;
  model::ModelFile a = RunAndReadModel("repeat-a", ShortJob(2, 2, 16), &summary_a);
  model::ModelFile b = RunAndReadModel("repeat-b", ShortJob(2, 2, 16), &summary_b);
  ASSERT_FALSE(a.values.empty());
  EXPECT_EQ(a.values, b.values);  // Bitwise: float == on every element.
  EXPECT_EQ(JsonNumber(summary_a, "train_loss"), JsonNumber(summary_b, "train_loss"));
  EXPECT_EQ(JsonNumber(summary_a, "final_test_accuracy"), JsonNumber(summary_b, "final_test_accuracy"));
}

TEST(SyncClusterTest, NumberOfServersDoesNotChangeTheModel) {
  // Initial values and per-element updates do not depend on how tensors are cut across servers.
  model::ModelFile one = RunAndReadModel("one-server", ShortJob(1, 2, 16));
  model::ModelFile three = RunAndReadModel("three-servers", ShortJob(3, 2, 16));
  ASSERT_FALSE(one.values.empty());
  EXPECT_EQ(one.values, three.values);
}

TEST(SyncClusterTest, UnevenLastBatchGivesAnEmptySliceWithoutHanging) {
  // 100 samples, 3 workers x 16: the last global batch has 4 samples, so workers 1 and 2 push
  // empty gradients with weight zero. The epoch must finish and count every sample once.
  std::string summary;
  absl::StatusOr<ClusterRun> run =
      LaunchCluster("uneven", {"--servers=2", "--workers=3", "--batch_size=16", "--epochs=2", "--train_limit=100",
                               "--test_limit=50", "--optimizer=sgd", "--lr=0.05"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->output;
  EXPECT_EQ(JsonNumber(run->summary_json, "samples"), 100) << run->summary_json;
}

}  // namespace
}  // namespace pstrain::testing
