// The scheduler core on a data stream (scheduler/stream_feed.h, Scheduler::RefreshStream), with
// real files: what each refresh makes trainable, what the views and the saved state carry, and the
// stream's errors failing the job; and progressive validation by file (scheduler/stream_scores.h).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"
#include "data/score_histogram.h"
#include "data/score_histogram_proto.h"
#include "scheduler/stream_feed.h"
#include "scheduler/stream_scores.h"

namespace pstrain::scheduler {
namespace {

namespace fs = std::filesystem;
using test_util::Reg;
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
  StreamDir()
      : dir_(fs::path(::testing::TempDir()) /
             absl::StrCat("stream-", ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
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

Scheduler::Options StreamJobOptions(const std::string& dir, int servers = 0) {
  JobSpec job;
  job.set_model("ctr");
  if (servers > 0) job.set_num_servers(servers);
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

// ASYNC on a stream: leases of the ready records only, `wait` while the stream goes on, done once
// it ended; a lease settled (confirmed by the server and reported by its worker) leaves the pool,
// and the server hears the watermark in its heartbeat answer, so neither side grows with the stream.
TEST(SchedulerStreamTest, AsyncLeasesFollowTheReadyRecordsAndSettledOnesLeaveThePool) {
  StreamDir dir;
  Scheduler::Options options = StreamJobOptions(dir.path(), /*servers=*/1);
  options.job.set_mode(ASYNC);
  options.job.set_lease_batches(2);  // leases of 100 records
  auto s = *Scheduler::Create(options);
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  for (const char* address : {"h:2", "h:3"}) ASSERT_TRUE(s->Register(Reg(WORKER, address)).ok());
  ASSERT_EQ(s->state(), RUNNING);
  auto lease_for = [&](int rank) { return test_util::LeaseFor(s.get(), rank); };
  // Worker `rank` pushed lease `id` whole and reports it; the server confirms it.
  auto trained = [&](int rank, const LeaseResponse& lease, int64_t batches) {
    ProgressReport r;
    r.set_worker_rank(rank);
    r.mutable_train()->set_samples(lease.end() - lease.begin());
    r.mutable_train()->set_steps(batches);
    LeaseProgress* p = r.add_leases();
    p->set_lease_id(lease.lease_id());
    p->set_batches_done(batches);
    EXPECT_TRUE(s->ReportProgress(r).ok());
    absl::StatusOr<HeartbeatResponse> answer = s->Heartbeat(test_util::ConfirmedBy(0, r));
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.value_or(HeartbeatResponse()).leases_settled_below();
  };

  EXPECT_TRUE(lease_for(0).wait()) << "no record is ready";
  dir.AddFile(0, 250);
  ASSERT_EQ(s->RefreshStream(), 1);
  const LeaseResponse a = lease_for(0);
  const LeaseResponse b = lease_for(1);
  const LeaseResponse c = lease_for(0);
  EXPECT_EQ(a.end(), 100);
  EXPECT_EQ(b.begin(), 100);
  EXPECT_EQ(c.begin(), 200);
  EXPECT_EQ(c.end(), 250) << "cut at the ready end";
  const LeaseResponse caught_up = lease_for(1);
  EXPECT_TRUE(caught_up.wait());
  EXPECT_FALSE(caught_up.epoch_done());

  EXPECT_EQ(trained(1, b, 2), 1) << "b is settled, but a, before it, is not";
  EXPECT_EQ(trained(0, a, 2), 3);
  EXPECT_EQ(trained(0, c, 1), 4);
  EXPECT_TRUE(lease_for(0).wait()) << "every ready record is trained, but the stream goes on";
  EXPECT_EQ(s->Snapshot().leases().leases_size(), 0) << "settled leases are not kept";

  dir.AddFile(1, 100);
  dir.End();
  ASSERT_EQ(s->RefreshStream(), 1);
  const LeaseResponse d = lease_for(1);
  EXPECT_EQ(d.begin(), 250);
  EXPECT_EQ(d.end(), 350);
  EXPECT_TRUE(lease_for(0).wait()) << "d is out";
  EXPECT_EQ(trained(1, d, 2), 5);
  EXPECT_TRUE(lease_for(0).epoch_done());
  const SchedulerState state = s->Snapshot();
  EXPECT_EQ(state.leases().first_lease_id(), 5);
  EXPECT_EQ(state.leases().leases_size(), 0);
  EXPECT_NE(s->SummaryJson().find("\"samples\": 350"), std::string::npos) << s->SummaryJson();
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

// A report's scores of `file`: `clicks` predictions of 0.9 that are clicks and `misses` of 0.2
// that are not (a perfect ranking), or the reverse when `inverted`.
FileScores ScoresOf(int64_t file, int clicks, int misses, bool inverted = false) {
  data::ScoreHistogram h;
  data::PredictionTotals totals;
  for (int i = 0; i < clicks; ++i) {
    EXPECT_TRUE(h.Add(inverted ? 0.2 : 0.9, true).ok());
    totals.log_loss_sum += data::LogLoss(inverted ? 0.2f : 0.9f, true);
  }
  for (int i = 0; i < misses; ++i) {
    EXPECT_TRUE(h.Add(inverted ? 0.9 : 0.2, false).ok());
    totals.log_loss_sum += data::LogLoss(inverted ? 0.9f : 0.2f, false);
  }
  FileScores f;
  f.set_file(file);
  *f.mutable_scores() = data::ScoreHistogramToProto(h);
  f.set_log_loss_sum(totals.log_loss_sum);
  return f;
}

TEST(StreamScoresTest, FilesCloseOnceTrainedAndTheWindowCoversTheNewest) {
  StreamScores scores(/*window_files=*/2);
  TrainStats train;
  train.set_samples(40);
  *train.add_files() = ScoresOf(0, 5, 5);
  *train.add_files() = ScoresOf(1, 5, 5, /*inverted=*/true);
  ASSERT_TRUE(scores.Check(train, 0, 2).ok());
  scores.Add(train);
  TrainStats more;
  more.set_samples(10);
  *more.add_files() = ScoresOf(2, 5, 5);
  ASSERT_TRUE(scores.Check(more, 1, 3).ok());
  scores.Add(more);

  const std::vector<data::StreamFile> catalog = {{"a", 0, 10}, {"b", 10, 10}, {"c", 20, 10}};
  scores.CloseBefore(catalog, 20);  // files 0 and 1 are wholly trained
  std::vector<StreamScores::File> files = scores.Files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_TRUE(files[0].closed);
  EXPECT_TRUE(files[1].closed);
  EXPECT_FALSE(files[2].closed);
  EXPECT_DOUBLE_EQ(*files[0].figures.auc, 1.0);
  EXPECT_DOUBLE_EQ(*files[1].figures.auc, 0.0);
  EXPECT_EQ(files[1].figures.samples, 10);
  EXPECT_NEAR(files[0].figures.log_loss, (5 * data::LogLoss(0.9f, true) + 5 * data::LogLoss(0.2f, false)) / 10, 1e-12);
  // The window: files 1 and 2 together, one ranking the other's inverse.
  const StreamScores::Figures window = scores.Window();
  EXPECT_EQ(window.samples, 20);
  EXPECT_NEAR(*window.auc, 0.5, 1e-9);

  // A late report for a closed file changes nothing.
  TrainStats late;
  late.set_samples(10);
  *late.add_files() = ScoresOf(0, 0, 10);
  ASSERT_TRUE(scores.Check(late, 0, 3).ok());
  scores.Add(late);
  EXPECT_EQ(scores.Files()[0].figures.samples, 10);

  // The saved state keeps every file's figures, and the histograms of the open file and the
  // window, so a restarted scheduler goes on exactly: more scores of the open file count.
  StreamState saved;
  for (const data::StreamFile& f : catalog) saved.add_files()->set_name(f.name);
  scores.Save(&saved);
  ASSERT_EQ(saved.scores_size(), 3);
  EXPECT_FALSE(saved.scores(0).has_histogram()) << "file 0 left the window";
  ASSERT_TRUE(StreamScores::CheckSaved(saved).ok()) << StreamScores::CheckSaved(saved);
  StreamScores restored(2, saved);
  files = restored.Files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_DOUBLE_EQ(*files[0].figures.auc, 1.0);
  EXPECT_EQ(files[1].figures.samples, 10);
  EXPECT_FALSE(files[2].closed);
  EXPECT_EQ(restored.Window().samples, 20);
  EXPECT_NEAR(*restored.Window().auc, 0.5, 1e-9);
  TrainStats after;
  after.set_samples(10);
  *after.add_files() = ScoresOf(2, 0, 10);
  restored.Add(after);
  restored.CloseBefore(catalog, 30);
  files = restored.Files();
  EXPECT_TRUE(files[2].closed);
  EXPECT_EQ(files[2].figures.samples, 20);
  EXPECT_DOUBLE_EQ(*files[2].figures.auc, 1.0) << "the clicks at 0.9 rank above every miss at 0.2";
}

// A saved state's scores are checked before a restarted scheduler takes them: each names the
// file and what is wrong.
TEST(StreamScoresTest, ASavedStatesScoresThatDoNotAddUpAreRefused) {
  StreamScores scores(2);
  TrainStats train;
  train.set_samples(10);
  *train.add_files() = ScoresOf(1, 5, 5);
  scores.Add(train);
  StreamState saved;
  saved.add_files()->set_name("a");
  saved.add_files()->set_name("b");
  scores.Save(&saved);
  ASSERT_TRUE(StreamScores::CheckSaved(saved).ok());

  StreamState bad = saved;
  bad.mutable_scores(0)->set_samples(11);
  absl::Status s = StreamScores::CheckSaved(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stream file 1: a histogram of 10 predictions for 11 samples"), std::string::npos) << s;
  bad = saved;
  bad.mutable_scores(0)->clear_histogram();
  EXPECT_NE(StreamScores::CheckSaved(bad).message().find("open file without its histogram"), std::string::npos);
  bad = saved;
  bad.mutable_scores(0)->set_file(2);
  EXPECT_NE(StreamScores::CheckSaved(bad).message().find("expected a file in [0, 2)"), std::string::npos);
  bad = saved;
  *bad.add_scores() = saved.scores(0);
  EXPECT_NE(StreamScores::CheckSaved(bad).message().find("given twice"), std::string::npos);
}

// A file trained wholly by workers killed before they reported its predictions closes listed,
// with no predictions and no AUC, between files that have scores.
TEST(StreamScoresTest, AFileTrainedWithoutScoresClosesListedWithNone) {
  StreamScores scores(/*window_files=*/3);
  TrainStats train;
  train.set_samples(20);
  *train.add_files() = ScoresOf(0, 5, 5);
  *train.add_files() = ScoresOf(2, 5, 5);
  scores.Add(train);
  const std::vector<data::StreamFile> catalog = {{"a", 0, 10}, {"b", 10, 10}, {"c", 20, 10}, {"d", 30, 10}};
  scores.CloseBefore(catalog, 20);
  std::vector<StreamScores::File> files = scores.Files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[1].index, 1);
  EXPECT_TRUE(files[1].closed);
  EXPECT_EQ(files[1].figures.samples, 0);
  EXPECT_FALSE(files[1].figures.auc.has_value());
  EXPECT_FALSE(files[2].closed) << "file 2 is not wholly trained yet";
  scores.CloseBefore(catalog, 40);
  files = scores.Files();
  ASSERT_EQ(files.size(), 4u);
  EXPECT_TRUE(files[2].closed);
  EXPECT_DOUBLE_EQ(*files[2].figures.auc, 1.0);
  EXPECT_EQ(files[3].figures.samples, 0);
  EXPECT_EQ(scores.Window().samples, 10) << "files 1..3: only file 2 has predictions";
}

TEST(StreamScoresTest, ScoresOfNoReadyFileOrTooManyAreRefused) {
  StreamScores scores(3);
  TrainStats train;
  train.set_samples(10);
  *train.add_files() = ScoresOf(4, 5, 5);
  absl::Status s = scores.Check(train, 7, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("worker 7"), std::string::npos) << s;
  EXPECT_NE(s.message().find("stream file 4"), std::string::npos) << s;
  train.mutable_files(0)->set_file(1);
  *train.add_files() = ScoresOf(0, 1, 1);
  s = scores.Check(train, 7, 2);  // 12 predictions for 10 samples
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("12 predictions"), std::string::npos) << s;
  train.set_samples(12);
  *train.add_files() = ScoresOf(0, 1, 1);
  EXPECT_NE(scores.Check(train, 7, 2).message().find("twice"), std::string::npos);
  train.mutable_files()->RemoveLast();
  train.mutable_files(0)->set_log_loss_sum(std::nan(""));
  EXPECT_EQ(scores.Check(train, 7, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(scores.Files().empty()) << "Check records nothing";
}

// A PyTorch model on a stream (model "external"): the first declaration gives no sizes (0 and 0:
// the scheduler counts the stream's records, and there is no test set); one that gives any is
// refused and changes nothing. The job then trains the ready records, as a built-in model's does.
// SYNC: a worker there from the start that has not reported yet may have trained many steps
// unreported; the files it predicted stay open until it reports, so its scores count. A worker
// that joins the running job is not waited for before its first report.
TEST(SchedulerStreamTest, AFileStaysOpenUntilEveryWorkerThereFromTheStartHasReported) {
  StreamDir dir;
  auto s = *Scheduler::Create(StreamJobOptions(dir.path(), /*servers=*/1));
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  for (const char* address : {"h:2", "h:3"}) ASSERT_TRUE(s->Register(Reg(WORKER, address)).ok());
  ASSERT_EQ(s->state(), RUNNING);
  dir.AddFile(0, 200);
  dir.AddFile(1, 200);
  ASSERT_EQ(s->RefreshStream(), 2);
  int64_t seq[8] = {0};
  // Worker `rank` reports global step `step` and its scores of `records` of file `file`.
  auto report = [&](int rank, int64_t step, int64_t file, int records) {
    ProgressReport r;
    r.set_worker_rank(rank);
    r.set_report_seq(++seq[rank]);
    r.set_step(step);
    r.mutable_train()->set_samples(records);
    r.mutable_train()->set_steps(step);
    *r.mutable_train()->add_files() = ScoresOf(file, records / 2, records - records / 2);
    const absl::Status status = s->ReportProgress(r);
    EXPECT_TRUE(status.ok()) << status;
  };
  auto file_samples = [&](int file) {
    const std::optional<scheduler::StreamStatus> stream = s->DashboardStatus().stream;
    EXPECT_TRUE(stream.has_value());
    return stream.has_value() && file < static_cast<int>(stream->files.size())
               ? std::make_pair(stream->files[file].closed, stream->files[file].samples)
               : std::make_pair(false, int64_t{-1});
  };

  report(0, 3, 0, 100);  // worker 0 is past file 0 (steps of 100 records); worker 1 said nothing
  EXPECT_EQ(file_samples(0), std::make_pair(false, int64_t{100})) << "file 0 must wait for worker 1";
  report(1, 3, 0, 100);
  EXPECT_EQ(file_samples(0), std::make_pair(true, int64_t{200})) << "every record of file 0 scored once";

  // A joiner is not waited for: file 1 closes once the workers there from the start are past it.
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:4")).ok());
  report(0, 4, 1, 100);
  report(1, 4, 1, 100);
  EXPECT_EQ(file_samples(1), std::make_pair(true, int64_t{200}));
}

TEST(SchedulerStreamTest, AnExternalModelDeclaresNoSizesAndTrainsTheReadyRecords) {
  StreamDir dir;
  Scheduler::Options options = StreamJobOptions(dir.path(), /*servers=*/1);
  options.job.set_model("external");
  options.shard_map = ShardMap();  // an external model's comes with its declaration
  auto s = *Scheduler::Create(options);
  dir.AddFile(0, 250);
  EXPECT_EQ(s->RefreshStream(), 1);
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  for (const char* address : {"h:2", "h:3"}) ASSERT_TRUE(s->Register(Reg(WORKER, address)).ok());
  EXPECT_EQ(s->state(), WAITING_FOR_ROLES) << "no model declared yet";

  model::ParamSpec w;
  w.name = "w";
  w.shape = {4};
  w.num_elements = 4;
  ModelDeclaration declaration;
  declaration.set_worker_rank(0);
  declaration.set_model_file(*model::SerializeModelFile({w}, std::vector<float>{1, 2, 3, 4}));
  declaration.set_train_samples(250);
  const absl::Status sized = s->DeclareModel(declaration);
  EXPECT_EQ(sized.code(), absl::StatusCode::kInvalidArgument) << sized;
  EXPECT_NE(sized.message().find("data stream"), std::string::npos) << sized;
  EXPECT_EQ(s->state(), WAITING_FOR_ROLES);

  declaration.set_train_samples(0);
  ASSERT_TRUE(s->DeclareModel(declaration).ok());
  EXPECT_EQ(s->state(), RUNNING);
  ClusterView view = s->View();
  EXPECT_EQ(view.train_samples(), 250);
  EXPECT_EQ(view.total_steps(), 2);
  EXPECT_EQ(view.shard_map().tensors_size(), 1);
  declaration.set_worker_rank(1);
  EXPECT_TRUE(s->DeclareModel(declaration).ok()) << "the second worker's matches";

  dir.AddFile(1, 120);
  dir.End();
  EXPECT_EQ(s->RefreshStream(), 1);
  view = s->View();
  EXPECT_EQ(view.train_samples(), 370);
  EXPECT_EQ(view.total_steps(), 4);
}

TEST(SchedulerStreamTest, AStreamJobIsCtrOrExternalWithOneEpochAndNoCosine) {
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
  for (Mode mode : {ASYNC, SSP}) {
    JobSpec leased = job;
    leased.set_mode(mode);
    EXPECT_TRUE(ValidateJobSpec(leased).ok()) << ValidateJobSpec(leased);
  }
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
  JobSpec external = job;
  external.set_model("external");
  external.mutable_data()->clear_format();
  ApplyJobDefaults(&external);
  EXPECT_EQ(external.data().format(), "criteo") << "a stream's records are CTR text";
  EXPECT_TRUE(ValidateJobSpec(external).ok()) << ValidateJobSpec(external);
  external.mutable_data()->set_format("idx");
  EXPECT_NE(ValidateJobSpec(external).message().find("data.format"), std::string::npos);
  external.mutable_data()->set_format("criteo");
  external.mutable_data()->set_train_samples(100);
  EXPECT_NE(ValidateJobSpec(external).message().find("data.train_samples"), std::string::npos);
}

}  // namespace
}  // namespace pstrain::scheduler
