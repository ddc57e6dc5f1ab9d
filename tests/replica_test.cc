// Live shard replicas (--replicas=2): a parameter server killed with SIGKILL mid-training loses
// nothing. Its shard's copy on the next server is promoted, the in-flight step is recomputed, and
// nothing is rolled back, so a SYNC job ends with the same model as an undisturbed run. A restarted
// server for the dead rank is not needed and exits 0.
#include <signal.h>

#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kEpochs = 3;
constexpr int kTrain = 12000;
// SYNC: ceil(12000 / (32 x 2 workers)) global batches per epoch.
constexpr int64_t kSyncSteps = kEpochs * 188;

std::vector<std::string> Job(const std::string& mode, const std::string& dir) {
  return {"--mode=" + mode,  "--epochs=3", "--train_limit=12000", "--test_limit=2000",
          "--batch_size=32", "--seed=9",   "--replicas=2",        "--final_model=" + dir + "/model.bin"};
}

// The step counters a server logs when it stops ("shard 1 ends at step 564"), one per store.
std::vector<int64_t> FinalSteps(const std::string& log) {
  std::vector<int64_t> out;
  std::regex re("shard [0-9]+ ends at step ([0-9]+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stoll((*it)[1].str()));
  }
  return out;
}

model::ModelFile ReadModel(const std::string& path) {
  absl::StatusOr<model::ModelFile> file = model::ReadModelFile(path);
  EXPECT_TRUE(file.ok()) << path << ": " << file.status();
  return file.ok() ? *file : model::ModelFile{};
}

TEST(ReplicaTest, SyncKilledServerIsReplacedByItsCopyWithNoRollback) {
  ManualCluster reference("replica-reference");
  reference.Start(2, 2, Job("sync", reference.dir()));
  const double undisturbed = JsonNumber(RunToEnd(reference), "final_test_accuracy");

  ManualCluster cluster("replica-sync");
  cluster.Start(2, 2, Job("sync", cluster.dir()));
  cluster.WaitForSteps(150);
  cluster.servers[1]->Kill(SIGKILL);
  absl::SleepFor(absl::Milliseconds(300));
  cluster.AddServer();  // A restart of the killed server: its shards are served; it is not needed.
  const std::string summary = RunToEnd(cluster);

  std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 3u) << summary;
  for (int e = 0; e < kEpochs; ++e) EXPECT_EQ(samples[e], kTrain) << "epoch " << e << "\n" << summary;
  EXPECT_THAT(summary, ContainsRegex("\"role\": *\"server\", *\"rank\": *[01], *\"kind\": *\"died\""));
  EXPECT_THAT(summary, Not(ContainsRegex("\"role\": *\"server\", *\"rank\": *[01], *\"kind\": *\"joined\"")));

  // The restarted server was told its rank is served and left quietly.
  absl::StatusOr<int> restarted = cluster.servers[2]->Wait(absl::Seconds(30));
  ASSERT_TRUE(restarted.ok()) << cluster.servers[2]->Output();
  EXPECT_EQ(*restarted, 0) << cluster.servers[2]->Output();
  EXPECT_THAT(cluster.servers[2]->Output(), HasSubstr("not needed"));

  // The survivor serves both shards; each store applied every step exactly once.
  absl::StatusOr<int> survivor = cluster.servers[0]->Wait(absl::Seconds(30));
  ASSERT_TRUE(survivor.ok() && *survivor == 0) << cluster.servers[0]->Output();
  const std::string log = cluster.servers[0]->Output();
  EXPECT_THAT(log, HasSubstr("promoted its copy of shard"));
  EXPECT_THAT(FinalSteps(log), ::testing::ElementsAre(kSyncSteps, kSyncSteps)) << log;
  for (auto& w : cluster.workers) EXPECT_THAT(w->Output(), Not(HasSubstr("rewinding")));

  // Nothing was rolled back and the recomputed step had the same inputs: the same model.
  const double accuracy = JsonNumber(summary, "final_test_accuracy");
  EXPECT_NEAR(accuracy, undisturbed, 0.005) << summary;
  const double difference =
      MaxRelativeDifference(ReadModel(reference.dir() + "/model.bin"), ReadModel(cluster.dir() + "/model.bin"));
  EXPECT_LT(difference, 1e-4);
  std::cout << "sync, server killed: accuracy " << accuracy << " (undisturbed " << undisturbed
            << "), largest relative difference of a tensor " << difference << "\n";
}

TEST(ReplicaTest, AsyncKilledServerIsReplacedByItsCopy) {
  // Evaluated on the whole test set, against two undisturbed runs: async runs differ by scheduling.
  auto async_job = [](const std::string& dir) {
    std::vector<std::string> job = Job("async", dir);
    job.push_back("--test_limit=10000");
    return job;
  };
  std::vector<double> references;
  for (int run = 0; run < 2; ++run) {
    ManualCluster reference("replica-async-reference");
    reference.Start(3, 2, async_job(reference.dir()));
    references.push_back(JsonNumber(RunToEnd(reference), "final_test_accuracy"));
  }
  ManualCluster cluster("replica-async");
  cluster.Start(3, 2, async_job(cluster.dir()));
  cluster.WaitForSteps(150);
  cluster.servers[2]->Kill(SIGKILL);
  const std::string summary = RunToEnd(cluster);
  std::vector<double> samples = JsonNumbers(summary, "samples");
  ASSERT_GE(samples.size(), 3u) << summary;
  for (int e = 0; e < kEpochs; ++e) EXPECT_EQ(samples[e], kTrain) << "epoch " << e << "\n" << summary;
  // Each batch is applied once per store: ceil(12000 / 32) updates per epoch on every shard.
  std::vector<int64_t> steps;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<int> code = cluster.servers[i]->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok() && *code == 0) << cluster.servers[i]->Output();
    for (int64_t s : FinalSteps(cluster.servers[i]->Output())) steps.push_back(s);
  }
  EXPECT_THAT(steps, ::testing::Each(kEpochs * 375)) << cluster.servers[0]->Output();
  EXPECT_EQ(steps.size(), 4u);
  EXPECT_TRUE(NearAnyReference(JsonNumber(summary, "final_test_accuracy"), references, 0.005)) << summary;
}

TEST(ReplicaTest, LosingBothCopiesOfAShardFailsTheJobClearly) {
  ManualCluster cluster("replica-both");
  std::vector<std::string> job = Job("sync", cluster.dir());
  job.push_back("--epochs=30");
  cluster.Start(2, 2, job);
  cluster.WaitForSteps(100);
  cluster.servers[0]->Kill(SIGKILL);
  cluster.servers[1]->Kill(SIGKILL);
  absl::StatusOr<int> code = cluster.scheduler->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << cluster.scheduler->Output();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("held the only copy of shard"));
  for (auto& w : cluster.workers) {
    absl::StatusOr<int> wc = w->Wait(absl::Seconds(30));
    ASSERT_TRUE(wc.ok()) << "a worker hangs after the job failed:\n" << w->Output();
    EXPECT_NE(*wc, 0);
  }
}

}  // namespace
}  // namespace pstrain::testing
