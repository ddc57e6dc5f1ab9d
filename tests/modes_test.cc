// Every mode, and compressed gradients, converge on a subset of Fashion-MNIST.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

double TrainAndGetAccuracy(const std::string& mode, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> flags = {"--mode=" + mode,  "--servers=2",           "--workers=2",
                                    "--epochs=3",      "--train_limit=12000",   "--test_limit=2000",
                                    "--batch_size=64", "--eval_last_epoch_only"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  absl::StatusOr<ClusterRun> run = LaunchCluster(mode, flags);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return 0;
  EXPECT_EQ(run->exit_code, 0) << run->output;
  EXPECT_EQ(JsonNumber(run->summary_json, "samples"), 12000) << run->summary_json;
  return JsonNumber(run->summary_json, "final_test_accuracy");
}

TEST(ModesTest, AsyncConvergesOnASubset) { EXPECT_GE(TrainAndGetAccuracy("async"), 0.80); }

TEST(ModesTest, SspConvergesOnASubset) { EXPECT_GE(TrainAndGetAccuracy("ssp", {"--staleness=1"}), 0.80); }

TEST(ModesTest, SyncConvergesOnASubset) { EXPECT_GE(TrainAndGetAccuracy("sync"), 0.80); }

// Compressed gradients (fp16 on the wire; top-k with error feedback, overlap on and off) still
// train: the same bar as uncompressed sync training.
TEST(ModesTest, SyncWithCompressedGradientsConverges) {
  EXPECT_GE(TrainAndGetAccuracy("sync", {"--compression=fp16"}), 0.80);
  EXPECT_GE(TrainAndGetAccuracy("sync", {"--compression=topk:0.05"}), 0.80);
  EXPECT_GE(TrainAndGetAccuracy("sync", {"--compression=bf16", "--overlap=false"}), 0.80);
}

TEST(ModesTest, AsyncWithTopKConverges) { EXPECT_GE(TrainAndGetAccuracy("async", {"--compression=topk:0.05"}), 0.80); }

}  // namespace
}  // namespace pstrain::testing
