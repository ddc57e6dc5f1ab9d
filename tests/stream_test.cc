// A CTR job on a data stream (--data_stream), as real processes, while pstrain-gen-ctr writes the
// stream's hourly files at a set rate: the workers catch up with the stream and wait for its next
// file, the scheduler takes each file in once it is marked ready, and the job ends on the end
// marker. SYNC on a stream trains global batch t on stream positions [t*G, (t+1)*G), so it must end
// with the model, byte for byte, of a one-epoch file job over the same records concatenated, and
// count every record once: undisturbed, with the scheduler killed and restarted (a file arriving
// while it is down), with a server killed and replaced from a checkpoint (the job rewinds to the
// cut's step, and so to its stream position), and within float rounding with a worker killed and
// replaced or stopped (SIGTERM) while it waits for the next file (its slices are then cut among
// other workers); and a job killed whole, resumed from its
// checkpoints after the writer removed a trained file (the catalog beside the checkpoints keeps
// the positions). ASYNC on a stream counts every record once, undisturbed, with a server replaced
// from a checkpoint, and with a worker and the scheduler killed; SSP too, undisturbed.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kHours = 4;
constexpr int64_t kPerHour = 3000;
constexpr int64_t kRecords = kHours * kPerHour;

// The stream's files: pstrain-gen-ctr writes the same records for the same flags, whatever the rate.
std::vector<std::string> Generator(const std::string& dir, double rate) {
  return {BinDir() + "/pstrain-gen-ctr",
          "--stream_dir=" + dir,
          absl::StrCat("--hours=", kHours),
          absl::StrCat("--records_per_hour=", kPerHour),
          "--new_key_rate=0.2",
          "--unique_keys=20000",
          "--seed=7",
          absl::StrCat("--rate=", rate)};
}

// The job, on the stream or on a folder of files; 2 workers x 128: 47 steps, the last one short.
// Rows start at zero in both (a stream's default, which a file job takes from the flag).
std::vector<std::string> Job(std::vector<std::string> extra) {
  std::vector<std::string> flags = {"--model=ctr",         "--batch_size=128", "--seed=5",
                                    "--embedding_dim=8",   "--hidden=32,16",   "--lr_schedule=constant",
                                    "--table_init_bound=0"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// The reference: the whole stream written at once, then trained as one epoch of one training file.
struct Reference {
  std::string stream_dir;
  std::string model;  // the model file's bytes
};

const Reference& TheReference() {
  static const Reference* reference = [] {
    auto* r = new Reference;
    r->stream_dir = MakeTempDir("stream-reference");
    absl::StatusOr<RunResult> gen = Run(Generator(r->stream_dir, 0), absl::Minutes(1));
    EXPECT_TRUE(gen.ok() && gen->exit_code == 0) << (gen.ok() ? gen->output : gen.status().ToString());
    const std::string files = MakeTempDir("stream-as-files");
    {
      std::ofstream train(files + "/train.tsv"), test(files + "/test.tsv");
      for (int h = 0; h < kHours; ++h) {
        const std::string part = ReadFile(r->stream_dir + absl::StrFormat("/part-%05d.tsv", h));
        train << part;
        if (h == kHours - 1) test << part;
      }
    }
    ManualCluster cluster("stream-reference-job");
    const std::string model = cluster.dir() + "/model.bin";
    cluster.Start(2, 2, Job({"--data_dir=" + files, "--epochs=1", "--final_model=" + model}));
    const std::string summary = RunToEnd(cluster);
    EXPECT_EQ(JsonNumbers(summary, "samples").at(0), kRecords) << summary;
    r->model = ReadFile(model);
    return r;
  }();
  return *reference;
}

// The stream's job in a cluster; the stream's folder exists (empty) before the scheduler starts.
struct StreamJob {
  explicit StreamJob(const std::string& name) : cluster(name), stream_dir(cluster.dir() + "/stream") {
    std::filesystem::create_directories(stream_dir);
  }
  std::vector<std::string> Flags(std::vector<std::string> extra = {}) const {
    extra.push_back("--data_stream=" + stream_dir);
    extra.push_back("--final_model=" + model());
    return Job(extra);
  }
  std::string model() const { return cluster.dir() + "/model.bin"; }
  void StartWriting(double rate) {
    absl::StatusOr<Child> child = Child::Start(Generator(stream_dir, rate), cluster.dir() + "/gen.log");
    ASSERT_TRUE(child.ok()) << child.status();
    writer = std::make_unique<Child>(*child);
  }
  void ExpectEveryRecordOnce(const std::string& summary) {
    ASSERT_NE(writer, nullptr);
    const absl::StatusOr<int> written = writer->Wait(absl::Minutes(1));
    EXPECT_TRUE(written.ok() && *written == 0) << writer->Output();
    EXPECT_EQ(JsonNumbers(summary, "samples").at(0), kRecords) << summary;
    for (int h = 0; h < kHours; ++h) {
      const std::string part = absl::StrFormat("/part-%05d.tsv", h);
      EXPECT_EQ(ReadFile(stream_dir + part), ReadFile(TheReference().stream_dir + part)) << part;
    }
  }

  // Progressive validation in `summary`: every file closed and listed, and each record scored
  // once (`exactly`), or at most once (a killed worker's unreported predictions are lost: a file
  // trained wholly by such workers is listed with none), each AUC better than chance.
  static void ExpectEveryFileScored(const std::string& summary, bool exactly) {
    const size_t progressive = summary.find("\"progressive\"");
    ASSERT_NE(progressive, std::string::npos) << summary;
    const std::vector<double> scored = JsonNumbers(summary.substr(progressive), "samples");
    if (exactly) {
      EXPECT_EQ(scored, std::vector<double>(kHours, kPerHour)) << summary;
    } else {
      ASSERT_EQ(scored.size(), static_cast<size_t>(kHours)) << summary;
      for (double n : scored) EXPECT_TRUE(n >= 0 && n <= kPerHour) << summary;
      EXPECT_GT(std::accumulate(scored.begin(), scored.end(), 0.0), kPerHour) << summary;
    }
    for (double auc : JsonNumbers(summary.substr(progressive), "auc")) EXPECT_GT(auc, 0.5) << summary;
    EXPECT_EQ(summary.find("\"closed\":false"), std::string::npos) << summary;
    EXPECT_NE(summary.find("\"closed\":true"), std::string::npos) << summary;
  }

  // The model of a run whose slices were cut among other workers for a while: the same sums in
  // another order, so the reference's model up to float rounding.
  void ExpectTheReferenceUpToRounding() const {
    absl::StatusOr<model::ModelFile> got = model::ParseModelFile(ReadFile(model()), "the stream's model");
    absl::StatusOr<model::ModelFile> want = model::ParseModelFile(TheReference().model, "the file job's model");
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    const double difference = MaxRelativeDifference(*got, *want);
    std::cerr << "the stream's model differs from the file job's by " << difference << " (relative)\n";
    EXPECT_LT(difference, 1e-3);
  }

  ManualCluster cluster;
  std::string stream_dir;
  std::unique_ptr<Child> writer;
};

TEST(StreamTest, AStreamWrittenWhileItTrainsEndsAtTheFileJobsModel) {
  const Reference& reference = TheReference();
  StreamJob job("stream-live");
  job.cluster.Start(2, 2, job.Flags());
  job.StartWriting(/*rate=*/6000);  // a file every half second
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  EXPECT_EQ(ReadFile(job.model()), reference.model) << "the stream's model differs from the file job's";
  // Progressive validation: every record scored once, before it was trained on, by file; every file
  // closed, with its AUC; nothing left behind.
  EXPECT_EQ(JsonNumber(summary, "lag_records"), 0) << summary;
  StreamJob::ExpectEveryFileScored(summary, /*exactly=*/true);
  // The workers did catch up with the stream and wait for it.
  EXPECT_NE(ReadFile(job.cluster.dir() + "/worker0.log").find("caught up with the data stream"), std::string::npos);
}

TEST(StreamTest, ASchedulerKilledMidStreamGoesOnFromItsStateAndTakesInWhatArrived) {
  const Reference& reference = TheReference();
  StreamJob job("stream-scheduler-restart");
  job.cluster.Start(2, 2, job.Flags({"--state_dir=" + job.cluster.dir() + "/state"}));
  job.StartWriting(/*rate=*/1500);  // a file every 2 s
  job.cluster.WaitForSteps(12);     // past the first file, before the third
  job.cluster.scheduler->Kill(SIGKILL);
  EXPECT_TRUE(job.cluster.scheduler->Wait(absl::Seconds(10)).ok());
  absl::SleepFor(absl::Milliseconds(2500));  // the next file is marked ready meanwhile
  job.cluster.RestartScheduler();
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  EXPECT_EQ(ReadFile(job.model()), reference.model) << "the restarted stream's model differs from the file job's";
}

TEST(StreamTest, AWorkerKilledMidStreamIsReplacedAndNoRecordIsLostOrRepeated) {
  TheReference();  // made before this job's cluster starts
  StreamJob job("stream-worker-killed");
  job.cluster.Start(2, 2, job.Flags({"--min_workers=1"}));
  job.StartWriting(/*rate=*/3000);
  job.cluster.WaitForSteps(12);
  job.cluster.workers[1]->Kill(SIGKILL);
  EXPECT_TRUE(job.cluster.workers[1]->Wait(absl::Seconds(10)).ok());
  job.cluster.AddWorker();
  job.cluster.workers.erase(job.cluster.workers.begin() + 1);  // RunToEnd waits for the live ones
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  job.ExpectTheReferenceUpToRounding();
}

TEST(StreamTest, AWorkerStoppedWhileWaitingForTheNextFileLeavesAndTheOthersGoOn) {
  TheReference();  // made before this job's cluster starts
  StreamJob job("stream-worker-leaves");
  job.cluster.Start(2, 2, job.Flags({"--min_workers=1"}));
  job.StartWriting(/*rate=*/1500);  // a file every 2 s; the workers train one in a fraction of that
  job.cluster.WaitForSteps(12);     // past the first file: waiting for the second
  job.cluster.workers[1]->Kill(SIGTERM);
  const absl::StatusOr<int> left = job.cluster.workers[1]->Wait(absl::Seconds(10));
  EXPECT_TRUE(left.ok() && *left == 0) << job.cluster.workers[1]->Output();
  EXPECT_NE(ReadFile(job.cluster.dir() + "/worker1.log").find("leaving the job"), std::string::npos);
  job.cluster.workers.erase(job.cluster.workers.begin() + 1);
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  job.ExpectTheReferenceUpToRounding();
}

TEST(StreamTest, AServerKilledMidStreamIsReplacedFromACheckpointAndTheStreamGoesOnFromItsStep) {
  const Reference& reference = TheReference();
  StreamJob job("stream-server-killed");
  job.cluster.Start(2, 2,
                    job.Flags({"--checkpoint_dir=" + job.cluster.dir() + "/ckpt", "--checkpoint_every_steps=5",
                               "--full_checkpoint_every=3", "--server_recovery_timeout_ms=30000"}));
  job.StartWriting(/*rate=*/3000);
  job.cluster.WaitForSteps(17);
  job.cluster.servers[1]->Kill(SIGKILL);
  EXPECT_TRUE(job.cluster.servers[1]->Wait(absl::Seconds(10)).ok());
  job.cluster.AddServer();  // takes rank 1 and restores the newest cut; the job rewinds to its step
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  EXPECT_EQ(ReadFile(job.model()), reference.model) << "the recovered stream's model differs from the file job's";
  EXPECT_NE(ReadFile(job.cluster.dir() + "/server2.log").find("from a checkpoint"), std::string::npos);
}

TEST(StreamTest, AKilledStreamJobResumesFromItsCutAfterTrainedFilesWereRemoved) {
  const Reference& reference = TheReference();
  StreamJob job("stream-resume");
  const std::vector<std::string> flags = job.Flags(
      {"--checkpoint_dir=" + job.cluster.dir() + "/ckpt", "--checkpoint_every_steps=5", "--full_checkpoint_every=3"});
  job.cluster.Start(2, 2, flags);
  job.StartWriting(/*rate=*/1500);  // a file every 2 s
  job.cluster.WaitForSteps(25);     // the cut of step 20 (position 5,120) is past the first file
  job.cluster.scheduler->Kill(SIGKILL);
  for (auto& s : job.cluster.servers) s->Kill(SIGKILL);
  for (auto& w : job.cluster.workers) w->Kill(SIGKILL);
  // A writer's retention: the first hour is trained and in every cut, so it goes.
  fs::remove(job.stream_dir + "/part-00000.tsv");
  fs::remove(job.stream_dir + "/part-00000.tsv.ready");

  ManualCluster resumed("stream-resumed");
  std::vector<std::string> again = flags;
  again.push_back("--resume");
  resumed.Start(2, 2, again);
  const std::string summary = RunToEnd(resumed);
  const absl::StatusOr<int> written = job.writer->Wait(absl::Minutes(1));
  EXPECT_TRUE(written.ok() && *written == 0) << job.writer->Output();
  EXPECT_EQ(ReadFile(job.model()), reference.model) << "the resumed stream's model differs from the file job's";
  // The resumed job trained every record after its cut, once.
  const std::string log = ReadFile(resumed.dir() + "/scheduler.log");
  EXPECT_NE(log.find("the data stream's catalog from"), std::string::npos) << log;
  std::smatch cut;
  ASSERT_TRUE(std::regex_search(log, cut, std::regex("continuing from step (\\d+)"))) << log;
  EXPECT_EQ(JsonNumbers(summary, "samples").at(0), kRecords - std::stoll(cut[1]) * 256) << summary;
}

// ASYNC on a stream: leases of the ready records, in order, while the writer writes; every record
// applied once (counted by the leases every server confirmed), every record scored once by file,
// and the workers wait for the next file when they are caught up.
TEST(StreamTest, AnAsyncJobOnAStreamTrainsAndScoresEveryRecordOnce) {
  StreamJob job("stream-async");
  job.cluster.Start(2, 2, job.Flags({"--mode=async", "--lease_batches=2"}));
  job.StartWriting(/*rate=*/3000);  // a file a second
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  EXPECT_EQ(JsonNumber(summary, "lag_records"), 0) << summary;
  StreamJob::ExpectEveryFileScored(summary, /*exactly=*/true);
  bool waited = false;
  for (int w = 0; w < 2; ++w) {
    waited |= ReadFile(absl::StrCat(job.cluster.dir(), "/worker", w, ".log")).find("caught up with the data stream") !=
              std::string::npos;
  }
  EXPECT_TRUE(waited);
  EXPECT_TRUE(model::ParseModelFile(ReadFile(job.model()), "the async stream's model").ok());
}

// SSP on a stream: a worker caught up with the stream holds nobody back (it finished, for now), and
// its next push brings it back in where the others are; every record applied and scored once.
TEST(StreamTest, AnSspJobOnAStreamTrainsAndScoresEveryRecordOnce) {
  StreamJob job("stream-ssp");
  job.cluster.Start(2, 2, job.Flags({"--mode=ssp", "--staleness=2", "--lease_batches=2"}));
  job.StartWriting(/*rate=*/3000);  // a file a second
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  StreamJob::ExpectEveryFileScored(summary, /*exactly=*/true);
}

// ASYNC on a stream with a server killed and replaced from its checkpoint: the lease pool stands in
// the replacement's lost confirmations with the holders' reports, the replacement hears the
// watermark in its first heartbeat answer, and every record is counted once.
TEST(StreamTest, AnAsyncStreamCountsEveryRecordOnceWhenAServerIsReplacedFromACheckpoint) {
  StreamJob job("stream-async-server");
  job.cluster.Start(2, 2,
                    job.Flags({"--mode=async", "--lease_batches=2", "--checkpoint_dir=" + job.cluster.dir() + "/ckpt",
                               "--checkpoint_every_steps=10", "--server_recovery_timeout_ms=30000"}));
  job.StartWriting(/*rate=*/3000);
  job.cluster.WaitForSteps(30);
  job.cluster.servers[1]->Kill(SIGKILL);
  EXPECT_TRUE(job.cluster.servers[1]->Wait(absl::Seconds(10)).ok());
  job.cluster.AddServer();
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  EXPECT_EQ(JsonNumber(summary, "lag_records"), 0) << summary;
  EXPECT_NE(ReadFile(job.cluster.dir() + "/server2.log").find("from a checkpoint"), std::string::npos);
}

// ASYNC or SSP churn on a stream (`mode_flags`): a worker killed mid-lease (its leases go to the
// others, the servers skip the batches it pushed) and the scheduler killed and restarted from its
// state (the lease pool, with its watermark, and the catalog): every record applied once all the
// same.
void ExpectNoRecordLostOrRepeatedWhenAWorkerAndTheSchedulerAreKilled(const std::string& name,
                                                                     std::vector<std::string> mode_flags) {
  StreamJob job(name);
  mode_flags.insert(mode_flags.end(),
                    {"--lease_batches=4", "--min_workers=1", "--state_dir=" + job.cluster.dir() + "/state"});
  job.cluster.Start(2, 2, job.Flags(mode_flags));
  job.StartWriting(/*rate=*/3000);  // a file a second
  job.cluster.WaitForSteps(20);
  job.cluster.workers[1]->Kill(SIGKILL);
  EXPECT_TRUE(job.cluster.workers[1]->Wait(absl::Seconds(10)).ok());
  job.cluster.workers.erase(job.cluster.workers.begin() + 1);  // RunToEnd waits for the live ones
  // The stream holds still until the replacement has joined: on a loaded machine the survivor
  // could otherwise train the rest of it, and the job end, before the replacement registers.
  job.writer->Kill(SIGSTOP);
  job.cluster.scheduler->Kill(SIGKILL);
  EXPECT_TRUE(job.cluster.scheduler->Wait(absl::Seconds(10)).ok());
  absl::SleepFor(absl::Milliseconds(1000));
  job.cluster.RestartScheduler();
  job.cluster.AddWorker();
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (absl::Now() < end && !absl::StrContains(job.cluster.scheduler->Output(), "joined the running job")) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(job.cluster.scheduler->Output(), ::testing::HasSubstr("joined the running job"));
  job.writer->Kill(SIGCONT);  // the next files are marked ready from now on
  const std::string summary = RunToEnd(job.cluster);
  job.ExpectEveryRecordOnce(summary);
  EXPECT_EQ(JsonNumber(summary, "lag_records"), 0) << summary;
}

TEST(StreamTest, AnAsyncStreamLosesAndRepeatsNoRecordWhenAWorkerAndTheSchedulerAreKilled) {
  ExpectNoRecordLostOrRepeatedWhenAWorkerAndTheSchedulerAreKilled("stream-async-churn", {"--mode=async"});
}

// SSP: the killed worker's clock leaves the gate with it, the replacement joins at the slowest
// clock of the others, and a caught-up worker holds nobody back across the scheduler's restart.
TEST(StreamTest, AnSspStreamLosesAndRepeatsNoRecordWhenAWorkerAndTheSchedulerAreKilled) {
  ExpectNoRecordLostOrRepeatedWhenAWorkerAndTheSchedulerAreKilled("stream-ssp-churn", {"--mode=ssp", "--staleness=2"});
}

// A whole ASYNC stream job killed (every process, SIGKILL) and started again with --resume and the
// first run's --state_dir: the scheduler goes on from its saved lease pool and catalog, each server
// from its newest checkpoint (as a replaced one does), and every record is counted once. Scores
// are counted at most once: the predictions a killed worker made but had not reported yet are lost
// with it (its lease is complete on the servers, so no one predicts those records again).
TEST(StreamTest, AKilledAsyncStreamJobResumesFromItsSchedulerState) {
  StreamJob job("stream-async-resume");
  const std::vector<std::string> flags =
      job.Flags({"--mode=async", "--lease_batches=2", "--checkpoint_dir=" + job.cluster.dir() + "/ckpt",
                 "--checkpoint_every_steps=10", "--state_dir=" + job.cluster.dir() + "/state"});
  job.cluster.Start(2, 2, flags);
  job.StartWriting(/*rate=*/3000);
  job.cluster.WaitForSteps(30);
  job.cluster.scheduler->Kill(SIGKILL);
  for (auto& s : job.cluster.servers) s->Kill(SIGKILL);
  for (auto& w : job.cluster.workers) w->Kill(SIGKILL);

  ManualCluster resumed("stream-async-resumed");
  std::vector<std::string> again = flags;
  again.push_back("--resume");
  resumed.Start(2, 2, again);
  const std::string summary = RunToEnd(resumed);
  job.ExpectEveryRecordOnce(summary);
  StreamJob::ExpectEveryFileScored(summary, /*exactly=*/false);
  const std::string log = ReadFile(resumed.dir() + "/scheduler.log");
  EXPECT_NE(log.find("resume: going on from the scheduler state"), std::string::npos) << log;
  EXPECT_TRUE(model::ParseModelFile(ReadFile(job.model()), "the resumed async stream's model").ok());
}

}  // namespace
}  // namespace pstrain::testing
