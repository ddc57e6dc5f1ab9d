// A whole job killed with SIGKILL (scheduler, servers and workers) and started again with
// --resume, with a different number of workers: the servers restore the newest consistent
// checkpoint cut, the workers continue at its data position with the first run's global batch, and
// the job ends as the undisturbed run does (SYNC mode).
#include <signal.h>

#include <filesystem>
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

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kTrainSamples = 12000;
constexpr int64_t kGlobalBatch = 64;  // 32 per worker x the first run's 2 workers
constexpr int64_t kStepsPerEpoch = (kTrainSamples + kGlobalBatch - 1) / kGlobalBatch;
constexpr int kEpochs = 4;

std::vector<std::string> Job(const std::string& checkpoint_dir) {
  return {"--mode=sync",
          "--epochs=" + std::to_string(kEpochs),
          "--train_limit=12000",
          "--test_limit=2000",
          "--batch_size=32",
          "--seed=11",
          "--checkpoint_dir=" + checkpoint_dir,
          "--checkpoint_every_steps=25"};
}

std::vector<int64_t> EpochSamples(const std::string& summary) {
  std::vector<int64_t> out;
  std::regex re("\"epoch\": ([0-9]+),[^}]*\"samples\": ([0-9]+)");
  for (auto it = std::sregex_iterator(summary.begin(), summary.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stoll((*it)[2].str()));
  }
  return out;
}

// Runs `job` on `servers` servers x 2 workers until it has made `steps` steps, then kills every
// process of it with SIGKILL: the whole job dies at once, leaving only its checkpoint folder.
void RunAndKillAt(const std::vector<std::string>& job, int64_t steps, const std::string& name, int servers = 2) {
  ManualCluster cluster(name);
  cluster.Start(servers, 2, job);
  cluster.WaitForSteps(steps);
  cluster.scheduler->Kill(SIGKILL);
  for (auto& s : cluster.servers) s->Kill(SIGKILL);
  for (auto& w : cluster.workers) w->Kill(SIGKILL);
}

TEST(ResumeTest, KilledJobResumesWithMoreWorkersAndEndsLikeAnUndisturbedRun) {
  ManualCluster reference("resume-reference");
  reference.Start(2, 2, Job(MakeTempDir("ckpt-reference")));
  const std::string undisturbed = RunToEnd(reference);

  const std::string dir = MakeTempDir("ckpt-resumed");
  // Workers report every 500 ms and a step takes a few ms, so the job may be a few hundred steps
  // further than 100 when it is killed: anywhere in its first three epochs.
  RunAndKillAt(Job(dir), 100, "resume-first");

  ManualCluster second("resume-second");
  std::vector<std::string> job = Job(dir);
  job.push_back("--resume");
  second.Start(2, 3, job);
  const std::string summary = RunToEnd(second);
  const std::string log = second.scheduler->Output();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("continuing from step ([0-9]+)"))) << log;
  const int64_t resumed_at = std::stoll(m[1].str());
  EXPECT_GE(resumed_at, 25);
  EXPECT_EQ(resumed_at % 25, 0);
  EXPECT_THAT(log, HasSubstr("keeping the first run's global batch 64"));

  // The resumed run trains the rest of the resume epoch, then whole epochs, each sample once.
  const int64_t resume_epoch = resumed_at / kStepsPerEpoch;
  ASSERT_LT(resume_epoch, kEpochs - 1) << "killed too late to resume anything: step " << resumed_at;
  const std::vector<int64_t> samples = EpochSamples(summary);
  ASSERT_EQ(samples.size(), static_cast<size_t>(kEpochs - resume_epoch)) << summary;
  EXPECT_EQ(samples[0], kTrainSamples - (resumed_at % kStepsPerEpoch) * kGlobalBatch) << summary;
  for (size_t e = 1; e < samples.size(); ++e) EXPECT_EQ(samples[e], kTrainSamples) << summary;
  // The same global batches in the same order; only the split among workers differs.
  EXPECT_NEAR(JsonNumber(summary, "final_test_accuracy"), JsonNumber(undisturbed, "final_test_accuracy"), 0.005)
      << summary;
}

// Resumes the checkpoints in `dir` on `servers` servers x 2 workers, with `extra` flags, to the
// end; returns the final model and the run summary with the scheduler's and servers' logs.
model::ModelFile ResumeOn(const std::string& dir, int servers, const std::string& name, std::string* log,
                          const std::vector<std::string>& extra = {}) {
  ManualCluster cluster(name);
  std::vector<std::string> job = Job(dir);
  job.insert(job.end(), extra.begin(), extra.end());
  job.push_back("--resume");
  job.push_back("--full_checkpoint_every=3");
  job.push_back("--final_model=" + cluster.dir() + "/model.bin");
  cluster.Start(servers, 2, job);
  const std::string summary = RunToEnd(cluster);
  *log = summary + cluster.scheduler->Output();
  for (auto& s : cluster.servers) *log += s->Output();
  absl::StatusOr<model::ModelFile> model = model::ReadModelFile(cluster.dir() + "/model.bin");
  EXPECT_TRUE(model.ok()) << model.status() << "\n" << *log;
  return model.ok() ? *model : model::ModelFile{};
}

std::string CopyOf(const std::string& dir, const std::string& name) {
  const std::string copy = MakeTempDir(name);
  std::filesystem::copy(dir, copy,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  return copy;
}

TEST(ResumeTest, ACheckpointOfTwoServersResumedOnThreeOrOneEndsBitwiseLikeGoingOnWithTwo) {
  // The first run cuts every 25 steps, each third cut a base and the others deltas, so the
  // re-cut reads chains.
  const std::string dir = MakeTempDir("ckpt-reshard");
  std::vector<std::string> first = Job(dir);
  first.push_back("--full_checkpoint_every=3");
  RunAndKillAt(first, 100, "reshard-first");
  const std::string on_three = CopyOf(dir, "ckpt-reshard-3"), on_one = CopyOf(dir, "ckpt-reshard-1");

  std::string log_two, log_three, log_one;
  const model::ModelFile two = ResumeOn(dir, 2, "reshard-on-2", &log_two);
  // With live copies (--replicas=2): each server's copy of the shard before its own is re-cut too.
  const model::ModelFile three = ResumeOn(on_three, 3, "reshard-on-3", &log_three, {"--replicas=2"});
  const model::ModelFile one = ResumeOn(on_one, 1, "reshard-on-1", &log_one);
  ASSERT_FALSE(two.values.empty());
  EXPECT_EQ(three.values, two.values);  // Bitwise: float == on every element.
  EXPECT_EQ(one.values, two.values);

  std::smatch m;
  ASSERT_TRUE(std::regex_search(log_three, m, std::regex("continuing from step ([0-9]+)"))) << log_three;
  EXPECT_THAT(log_three, HasSubstr("it was taken on 2 servers, and the 3 servers of this run re-shard it"));
  EXPECT_THAT(log_three, HasSubstr("re-cut the 2 servers' checkpoints of step " + m[1].str()));
  EXPECT_THAT(log_one, HasSubstr("it was taken on 2 servers, and the 1 servers of this run re-shard it"));
  EXPECT_THAT(log_one, HasSubstr("re-cut the 2 servers' checkpoints of step " + m[1].str()));
  EXPECT_THAT(log_three, HasSubstr("\"resumed\": {\"step\": " + m[1].str() + ", \"from_servers\": 2, \"servers\": 3}"));
  EXPECT_THAT(log_two, Not(HasSubstr("re-cut")));
  EXPECT_THAT(log_three, HasSubstr("rolling back its copy of shard 2 to step " + m[1].str()));
  // The history beside the checkpoints: steps up to the cut were taken on 2 servers, after it on 3.
  EXPECT_THAT(ReadFile(on_three + "/server_counts.textproto"),
              HasSubstr("eras {\n  from_step: " + m[1].str() + "\n  num_servers: 3\n}"));

  // The 3-server run's own newest cut, resumed on 2 again, still ends with the same model: the
  // history tells its 3-server cuts from the 2-server ones before them.
  std::string log_back;
  const model::ModelFile back = ResumeOn(on_three, 2, "reshard-3-on-2", &log_back);
  EXPECT_EQ(back.values, two.values);
  EXPECT_THAT(log_back, HasSubstr("it was taken on 3 servers, and the 2 servers of this run re-shard it"));
}

TEST(ResumeTest, ResumeRefusesAnotherJobOrAFolderWithoutOne) {
  const std::string dir = MakeTempDir("ckpt-refused");
  RunAndKillAt(Job(dir), 60, "resume-refused-first");

  std::vector<std::string> argv = {BinDir() + "/pstrain-scheduler", "--port=0", "--resume"};
  for (const std::string& flag : Job(dir)) argv.push_back(flag);
  argv.push_back("--seed=12");
  absl::StatusOr<Child> other = Child::Start(argv, dir + "/other.log");
  ASSERT_TRUE(other.ok());
  absl::StatusOr<int> code = other->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0);
  EXPECT_THAT(other->Output(), HasSubstr("resume: seed is 12, but the job in"));

  // A new job (no --resume) refuses a folder that holds another run's checkpoints.
  argv = {BinDir() + "/pstrain-scheduler", "--port=0"};
  for (const std::string& flag : Job(dir)) argv.push_back(flag);
  absl::StatusOr<Child> fresh = Child::Start(argv, dir + "/fresh.log");
  ASSERT_TRUE(fresh.ok());
  code = fresh->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0);
  EXPECT_THAT(fresh->Output(), HasSubstr("already holds checkpoints of an earlier run"));
  EXPECT_THAT(fresh->Output(), HasSubstr("pass --resume to continue that job"));

  const std::string empty = MakeTempDir("ckpt-empty");
  argv = {BinDir() + "/pstrain-scheduler", "--port=0", "--resume"};
  for (const std::string& flag : Job(empty)) argv.push_back(flag);
  absl::StatusOr<Child> none = Child::Start(argv, empty + "/none.log");
  ASSERT_TRUE(none.ok());
  code = none->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0);
  EXPECT_THAT(none->Output(), HasSubstr("resume: no job manifest"));
}

}  // namespace
}  // namespace pstrain::testing
