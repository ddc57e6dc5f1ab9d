// The scheduler core on a data stream (scheduler/stream_feed.h, Scheduler::RefreshStream), with
// real files: what each refresh makes trainable, what the views and the saved state carry, and the
// stream's errors failing the job.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"
#include "scheduler/stream_feed.h"

namespace pstrain::scheduler {
namespace {

namespace fs = std::filesystem;
using test_util::TinyJobOptions;

TEST(StreamTrainableStepsTest, WholeGlobalBatchesAndTheShortLastOnceEnded) {
  EXPECT_EQ(StreamTrainableSteps(0, 100, false), 0);
  EXPECT_EQ(StreamTrainableSteps(99, 100, false), 0);
  EXPECT_EQ(StreamTrainableSteps(250, 100, false), 2);
  EXPECT_EQ(StreamTrainableSteps(250, 100, true), 3);
  EXPECT_EQ(StreamTrainableSteps(300, 100, true), 3);
  EXPECT_EQ(StreamTrainableSteps(0, 100, true), 0);
}

// A folder the test writes a stream into: `records` lines a file, marked ready.
class StreamDir {
 public:
  StreamDir() : dir_(fs::path(::testing::TempDir()) / absl::StrCat("stream-", ::testing::UnitTest::GetInstance()
                                                                                     ->current_test_info()
                                                                                     ->name())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void AddFile(int hour, int records) {
    const std::string name = absl::StrFormat("part-%05d.tsv", hour);
    std::ofstream out(dir_ / name);
    for (int i = 0; i < records; ++i) out << "1\t" << i << "\n";
    out.close();
    std::ofstream(dir_ / (name + ".ready")).close();
  }
  void End() { std::ofstream(dir_ / "_END").close(); }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

Scheduler::Options StreamJobOptions(const std::string& dir) {
  JobSpec job;
  job.set_model("ctr");
  job.mutable_data()->set_stream_dir(dir);
  job.set_batch_size(50);  // 2 workers: a global batch of 100
  return TinyJobOptions(job, 8, 0, 0, 0, [] { return absl::Now(); });
}

TEST(SchedulerStreamTest, EachRefreshMakesTheReadyFilesWholeBatchesTrainable) {
  StreamDir dir;
  auto scheduler = *Scheduler::Create(StreamJobOptions(dir.path()));
  EXPECT_EQ(scheduler->RefreshStream(), 0);
  EXPECT_EQ(scheduler->View().total_steps(), 0);

  dir.AddFile(0, 250);
  EXPECT_EQ(scheduler->RefreshStream(), 1);
  ClusterView view = scheduler->View();
  EXPECT_EQ(view.train_samples(), 250);
  EXPECT_EQ(view.total_steps(), 2);  // the half batch waits for the next file
  ASSERT_EQ(view.stream().files_size(), 1);
  EXPECT_EQ(view.stream().files(0).name(), "part-00000.tsv");
  EXPECT_FALSE(view.stream().ended());
  const int64_t epoch = view.membership_epoch();

  dir.AddFile(1, 120);
  dir.End();
  EXPECT_EQ(scheduler->RefreshStream(), 1);
  view = scheduler->View();
  EXPECT_EQ(view.train_samples(), 370);
  EXPECT_EQ(view.total_steps(), 4);  // ended: the short last batch too
  ASSERT_EQ(view.stream().files_size(), 2);
  EXPECT_EQ(view.stream().files(1).first(), 250);
  EXPECT_TRUE(view.stream().ended());
  EXPECT_EQ(view.membership_epoch(), epoch) << "a new file is no membership change";
  EXPECT_EQ(scheduler->RefreshStream(), 0) << "nothing comes after the end";
}

TEST(SchedulerStreamTest, ARestoredSchedulerKeepsTheSavedCatalogAndTakesInWhatArrived) {
  StreamDir dir;
  auto first = *Scheduler::Create(StreamJobOptions(dir.path()));
  dir.AddFile(0, 200);
  ASSERT_EQ(first->RefreshStream(), 1);
  const SchedulerState state = first->Snapshot();
  ASSERT_EQ(state.stream().files_size(), 1);
  EXPECT_EQ(state.stream().files(0).records(), 200);

  // Another file arrived while no scheduler ran, and the first one was removed.
  fs::remove(fs::path(dir.path()) / "part-00000.tsv");
  dir.AddFile(1, 100);
  auto restored = *Scheduler::Restore(StreamJobOptions(dir.path()), state);
  EXPECT_EQ(restored->View().train_samples(), 200) << "the saved catalog, before any refresh";
  // None of its records was trained, so that is a loss: the job fails and names the file.
  EXPECT_EQ(restored->RefreshStream(), 0);
  const ClusterView view = restored->View();
  EXPECT_EQ(view.state(), FAILED);
  EXPECT_NE(view.failure().find("part-00000.tsv"), std::string::npos) << view.failure();
}

TEST(SchedulerStreamTest, AFileOutOfNameOrderFailsTheJobAndNamesIt) {
  StreamDir dir;
  auto scheduler = *Scheduler::Create(StreamJobOptions(dir.path()));
  dir.AddFile(5, 100);
  ASSERT_EQ(scheduler->RefreshStream(), 1);
  dir.AddFile(3, 100);  // sorts before a file already taken: its records would shift every position
  EXPECT_EQ(scheduler->RefreshStream(), 0);
  const ClusterView view = scheduler->View();
  EXPECT_EQ(view.state(), FAILED);
  EXPECT_NE(view.failure().find("part-00003.tsv"), std::string::npos) << view.failure();
}

TEST(SchedulerStreamTest, AStreamJobIsSyncCtrWithOneEpochAndNoCosine) {
  JobSpec job;
  job.set_model("ctr");
  job.mutable_data()->set_stream_dir("/somewhere");
  ApplyJobDefaults(&job);
  EXPECT_EQ(job.epochs(), 1);
  EXPECT_EQ(job.optimizer().schedule().type(), LrSchedule::CONSTANT);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  auto refused = [&](auto change, const std::string& field) {
    JobSpec bad = job;
    change(&bad);
    const absl::Status s = ValidateJobSpec(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  refused([](JobSpec* j) { j->set_mode(ASYNC); }, "mode");
  refused([](JobSpec* j) { j->set_epochs(2); }, "epochs");
  refused([](JobSpec* j) { j->set_max_steps(10); }, "max_steps");
  refused([](JobSpec* j) { j->mutable_optimizer()->mutable_schedule()->set_type(LrSchedule::COSINE); },
          "optimizer.schedule");
  refused([](JobSpec* j) { j->mutable_data()->set_train_limit(5); }, "data.train_limit");
  refused(
      [](JobSpec* j) {
        j->set_model("mlp");
        j->mutable_data()->set_format("idx");
      },
      "data.stream_dir");
}

}  // namespace
}  // namespace pstrain::scheduler
