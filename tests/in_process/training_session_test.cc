// Unit tests of the worker library's protocol (worker/training_session.h) on a whole job in one
// process: a real scheduler core and real parameter stores behind the in-process SchedulerApi and
// PsApi, a simulated clock, and faults injected where the multi-process tests can only hope to
// hit them (a refused step, a lost answer, a dead worker holding a lease, a dead server).
//
// The "model" is 8 floats in two tensors, and a sample's gradient is a fixed function of its
// index, in multiples of 1/8 with power-of-two batch sizes and learning rate, so every sum is
// exact and runs can be compared bit for bit.
#include <algorithm>
#include <numeric>
#include <cmath>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/key_hash.h"
#include "common/sparse_rows.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "data/score_histogram.h"
#include "tests/in_process/in_process_cluster.h"
#include "tests/in_process/tiny_job.h"
#include "worker/training_session.h"

namespace pstrain::in_process {
namespace {

using worker::TrainingSession;
using Work = TrainingSession::Work;
using ::testing::ElementsAreArray;

constexpr int64_t kTrain = 32;
constexpr int64_t kTest = 10;

// Sample i's gradient for element k: a multiple of 1/8 in [-5/8, 5/8].
float SampleGradient(int64_t i, int k) { return static_cast<float>((i * 7 + k) % 11 - 5) / 8.0f; }

// Sparse jobs (SparseJob): the keys sample i touches in table 0, and the batch's sorted unique
// keys with, per key, the mean over the batch of SampleGradient of the samples that touch it.
std::vector<uint64_t> SampleKeys(int64_t i) {
  return {static_cast<uint64_t>(i % 5), static_cast<uint64_t>(10 + i % 3)};
}

std::vector<uint64_t> BatchKeys(absl::Span<const int64_t> samples) {
  std::vector<uint64_t> keys;
  for (int64_t i : samples) {
    for (uint64_t k : SampleKeys(i)) keys.push_back(k);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

// What one worker's loop saw.
struct Driven {
  absl::Status status;
  int64_t applied = 0;
  int64_t recomputed = 0;
  std::vector<size_t> batch_sizes;                      // of every kTrain work, in order
  std::map<int, std::vector<int64_t>> applied_samples;  // by epoch, samples of applied steps
  bool left = false;
};

// Hooks a test may set to act at points of the loop.
struct Hooks {
  // Before the gradient is computed; returning false stops the loop there (the worker "dies").
  std::function<bool(const Work&, const Driven&)> before_step;
  bool overlap_in_descending_parts = false;
  // Evaluate as a CTR model: report the scores of TestPrediction with the results.
  bool report_scores = false;
  // Before each evaluation report.
  std::function<void(TrainingSession*, const Work&)> before_evaluation_report;
  // Sparse jobs: whether a training step looks rows up at all (unset: every step does).
  std::function<bool(const Work&)> look_up_rows;
  // Sparse jobs: pull table 0 by its id (PullRows(tables, keys)), as a module per table does.
  bool pull_by_table = false;
  // Each try of a training step, once its rows are pulled, before its gradient: what it computes on.
  std::function<void(TrainingSession*, const Work&)> on_step;
};

// A CTR model's prediction for test sample i, each in a bin of its own, and its label: of the 10
// test samples, 1, 4, 6 and 9 are clicked.
double TestPrediction(int64_t i) { return static_cast<double>(i + 1) / (kTest + 1); }
bool TestClicked(int64_t i) { return i == 1 || i == 4 || i == 6 || i == 9; }

// Drives `session` as a training loop would, computing the mean of SampleGradient over the batch.
Driven Drive(TrainingSession* session, const Hooks& hooks = {}) {
  Driven d;
  Work work;
  while (true) {
    d.status = session->Next(&work);
    if (!d.status.ok()) return d;
    if (work.kind == Work::kDone) {
      d.left = work.left;
      return d;
    }
    if (work.kind == Work::kEvaluate) {
      model::BatchStats stats;
      for (int64_t i = work.begin; i < work.end; ++i) {
        stats.loss_sum += static_cast<double>(i);
        stats.correct += i < 3 ? 1 : 0;
      }
      stats.samples = work.end - work.begin;
      if (session->num_tables() > 0) {
        std::vector<int64_t> test(work.end - work.begin);
        std::iota(test.begin(), test.end(), work.begin);
        const std::vector<uint64_t> keys = BatchKeys(test);
        d.status = session->PullRows({keys});
        if (!d.status.ok()) return d;
      }
      if (hooks.before_evaluation_report) hooks.before_evaluation_report(session, work);
      data::ScoreHistogram scores;
      if (hooks.report_scores) {
        for (int64_t i = work.begin; i < work.end; ++i) {
          EXPECT_TRUE(scores.Add(TestPrediction(i), TestClicked(i)).ok());
        }
      }
      d.status = session->ReportEvaluation(stats, hooks.report_scores ? &scores : nullptr);
      if (!d.status.ok()) return d;
      continue;
    }
    if (hooks.before_step && !hooks.before_step(work, d)) return d;
    d.batch_sizes.push_back(work.samples.size());
    absl::StatusOr<model::GradientSink*> begun = session->BeginStep();
    if (!begun.ok()) {
      d.status = begun.status();
      return d;
    }
    model::GradientSink* sink = *begun;
    absl::Span<float> grad = session->gradient();
    const float n = static_cast<float>(work.samples.size());
    for (int k = 0; k < static_cast<int>(grad.size()); ++k) {
      float sum = 0;
      for (int64_t i : work.samples) sum += SampleGradient(i, k);
      grad[k] = sum / n;
    }
    if (session->num_tables() > 0 && (!hooks.look_up_rows || hooks.look_up_rows(work))) {
      const std::vector<uint64_t> keys = BatchKeys(work.samples);
      d.status = hooks.pull_by_table ? session->PullRows(std::vector<int>{0}, {keys}) : session->PullRows({keys});
      if (!d.status.ok()) return d;
      absl::Span<float> rows = session->row_gradient(0);
      EXPECT_EQ(rows.size(), keys.size() * 2);
      for (int64_t i : work.samples) {
        for (uint64_t key : SampleKeys(i)) {
          const size_t pos = std::lower_bound(keys.begin(), keys.end(), key) - keys.begin();
          for (int e = 0; e < 2; ++e) rows[pos * 2 + e] += SampleGradient(i, e + 3) / n;
        }
      }
    }
    if (hooks.on_step) hooks.on_step(session, work);
    if (sink != nullptr) {
      sink->GradientReady(1, 2);  // "b" first, as backward reaches the last layer first
      sink->GradientReady(0, 1);
    }
    model::BatchStats stats;
    stats.loss_sum = n;
    absl::StatusOr<TrainingSession::StepResult> result = session->EndStep(stats);
    if (!result.ok()) {
      d.status = result.status();
      return d;
    }
    if (*result == TrainingSession::StepResult::kRecompute) {
      ++d.recomputed;
      continue;
    }
    ++d.applied;
    auto& seen = d.applied_samples[work.epoch];
    seen.insert(seen.end(), work.samples.begin(), work.samples.end());
  }
}

std::unique_ptr<InProcessCluster> StartCluster(const JobSpec& job) {
  auto cluster = InProcessCluster::Create(job, TinyParams(), kTrain, kTest);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_TRUE((*cluster)->Start().ok());
  return std::move(cluster).value();
}

// A cluster of `job` whose one worker (rank 0) ran it to the end.
std::unique_ptr<InProcessCluster> StartClusterAndRun(const JobSpec& job) {
  auto cluster = StartCluster(job);
  worker::SessionOptions options = cluster->SessionOptionsFor(0);
  auto session = TrainingSession::Create(options, &cluster->scheduler(), &cluster->ps());
  EXPECT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE(Drive(session->get()).status.ok());
  return cluster;
}

std::unique_ptr<TrainingSession> Session(InProcessCluster& cluster, int rank,
                                         const std::atomic<bool>* leave = nullptr) {
  worker::SessionOptions options = cluster.SessionOptionsFor(rank);
  options.leave = leave;
  auto session = TrainingSession::Create(options, &cluster.scheduler(), &cluster.ps());
  EXPECT_TRUE(session.ok()) << session.status();
  return std::move(session).value();
}

// Runs every worker's loop on a thread of its own, to the end.
std::vector<Driven> RunWorkers(InProcessCluster& cluster, const std::vector<int>& ranks,
                               std::map<int, Hooks> hooks = {}) {
  std::vector<std::unique_ptr<TrainingSession>> sessions;
  for (int rank : ranks) sessions.push_back(Session(cluster, rank));
  std::vector<Driven> driven(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    // Looked up here, not on the worker's thread: operator[] inserts, and the threads share the map.
    const Hooks* worker_hooks = &hooks[ranks[i]];
    threads.emplace_back([&, i, worker_hooks]() {
      driven[i] = Drive(sessions[i].get(), *worker_hooks);
      if (!driven[i].status.ok()) {
        // As a worker process reports its failure: the job fails, and nobody waits for it.
        cluster.core().Fail(driven[i].status);
        cluster.ps().CancelAll(std::string(driven[i].status.message()));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return driven;
}

std::vector<int64_t> AllSamples() {
  std::vector<int64_t> all(kTrain);
  for (int64_t i = 0; i < kTrain; ++i) all[i] = i;
  return all;
}

// Every epoch's applied samples, over all workers, are the training set exactly once.
void ExpectEachSampleOncePerEpoch(const std::vector<Driven>& driven, int epochs) {
  for (int e = 0; e < epochs; ++e) {
    std::vector<int64_t> seen;
    for (const Driven& d : driven) {
      auto it = d.applied_samples.find(e);
      if (it != d.applied_samples.end()) seen.insert(seen.end(), it->second.begin(), it->second.end());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_THAT(seen, ElementsAreArray(AllSamples())) << "epoch " << e;
  }
}

// The scheduler counted every epoch's samples once and every test sample once.
void ExpectSummaryExact(InProcessCluster& cluster) {
  const JobStatus status = cluster.core().Status();
  EXPECT_EQ(status.state(), FINISHED) << status.failure();
  ASSERT_EQ(status.epochs_done_size(), 2);
  for (const EpochSummary& e : status.epochs_done()) {
    EXPECT_EQ(e.samples(), kTrain) << "epoch " << e.epoch();
    EXPECT_DOUBLE_EQ(e.test_accuracy(), 0.3) << "epoch " << e.epoch();  // indices 0, 1, 2 of 10
    EXPECT_DOUBLE_EQ(e.test_loss(), 4.5) << "epoch " << e.epoch();      // the mean index
    EXPECT_FALSE(e.has_test_auc()) << "epoch " << e.epoch();            // no scores reported
  }
}

// The weights a sync job ends with when one worker computes every global batch of `global` samples.
std::vector<float> OneWorkerWeights(Mode mode, int global, bool overlap = false) {
  JobSpec job = TinyJob(mode, 1, global);
  job.set_overlap(overlap);
  auto cluster = StartCluster(job);
  std::vector<Driven> driven = RunWorkers(*cluster, {0});
  EXPECT_TRUE(driven[0].status.ok()) << driven[0].status;
  return cluster->ServerWeights();
}

// An ASYNC job of workers 0 and 1 where worker 1 dies after one batch of its first lease (2
// batches): worker 0 trains what is free, then waits for the dead worker's lease to come back and
// trains the rest. Every sample counts once per epoch, and the summary is exact.
void RunAsyncJobWhereWorker1DiesMidLease(InProcessCluster& cluster) {
  std::unique_ptr<TrainingSession> s0 = Session(cluster, 0);
  std::unique_ptr<TrainingSession> s1 = Session(cluster, 1);
  Hooks dies;
  dies.before_step = [](const Work&, const Driven& d) { return d.applied < 1; };
  Driven d1 = Drive(s1.get(), dies);
  ASSERT_TRUE(d1.status.ok()) << d1.status;
  Driven d0;
  std::thread t0([&]() { d0 = Drive(s0.get()); });
  while (cluster.scheduler().calls("LeaseWork") < 6) absl::SleepFor(absl::Milliseconds(1));
  cluster.HeartbeatAndAdvance(absl::Seconds(4), /*silent=*/{1});
  t0.join();
  ASSERT_TRUE(d0.status.ok()) << d0.status;
  ExpectEachSampleOncePerEpoch({d0, d1}, 2);
  ExpectSummaryExact(cluster);
}

// TinyJob with an embedding table "t" of dim 2 (SGD at 0.5) that the loop's samples touch.
JobSpec SparseJob(Mode mode, int workers, int batch_size) {
  JobSpec job = TinyJob(mode, workers, batch_size);
  TableSpec* t = job.add_tables();
  t->set_name("t");
  t->set_dim(2);
  t->mutable_optimizer()->set_type(SparseOptimizerSpec::SGD);
  t->mutable_optimizer()->set_lr(0.5f);
  return job;
}

// Every row the loop touches (keys 0..4 and 10..12 of table 0), as the servers hold them.
std::vector<float> ServerRows(InProcessCluster& cluster) {
  std::vector<float> out;
  for (uint64_t key : {0, 1, 2, 3, 4, 10, 11, 12}) {
    const int shard = ServerOfKey(key, cluster.job().num_servers());
    PullRequest req;
    req.set_worker_rank(cluster.core().View().workers(0).rank());
    req.set_membership_epoch(cluster.store(shard).membership_epoch());
    req.set_step(cluster.store(shard).step());  // the rows as they are now
    req.set_rows_only(true);
    SetKeys(0, std::vector<uint64_t>{key}, req.add_sparse());
    PullResponse resp;
    absl::Status status = absl::UnknownError("no answer");
    cluster.store(shard).Pull(req, &resp, [&](absl::Status s) { status = s; });
    EXPECT_TRUE(status.ok()) << status;
    if (resp.sparse_size() != 1) return {};
    std::vector<float> row(2);
    CopyRows(resp.sparse(0), absl::MakeSpan(row));
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

TEST(TrainingSessionTest, SparseSyncWorkersMatchOneWorkerWithTheWholeBatchRowForRow) {
  auto one = StartCluster(SparseJob(SYNC, 1, 8));
  ASSERT_TRUE(RunWorkers(*one, {0})[0].status.ok());
  auto two = StartCluster(SparseJob(SYNC, 2, 4));
  std::vector<Driven> driven = RunWorkers(*two, {0, 1});
  for (const Driven& d : driven) ASSERT_TRUE(d.status.ok()) << d.status;
  ExpectEachSampleOncePerEpoch(driven, 2);
  ExpectSummaryExact(*two);
  EXPECT_EQ(two->ServerWeights(), one->ServerWeights());
  const std::vector<float> rows = ServerRows(*two);
  EXPECT_EQ(rows, ServerRows(*one));
  // The rows moved: 2 epochs of updates, not the initial values.
  auto fresh = StartCluster(SparseJob(SYNC, 1, 8));
  EXPECT_NE(rows, ServerRows(*fresh));
  int64_t total_rows = 0;
  for (int s = 0; s < 2; ++s) total_rows += two->store(s).TableStats()[0].rows;
  EXPECT_EQ(total_rows, 8) << "every touched key has one row, on the server its hash names";
}

TEST(TrainingSessionTest, SparseTablePulledByItsIdTrainsAsAPullOfEveryTable) {
  auto all = StartCluster(SparseJob(SYNC, 1, 8));
  ASSERT_TRUE(RunWorkers(*all, {0})[0].status.ok());
  auto by_id = StartCluster(SparseJob(SYNC, 1, 8));
  std::unique_ptr<TrainingSession> session = Session(*by_id, 0);
  Hooks hooks;
  hooks.pull_by_table = true;
  ASSERT_TRUE(Drive(session.get(), hooks).status.ok());
  EXPECT_EQ(ServerRows(*by_id), ServerRows(*all));
}

TEST(TrainingSessionTest, SparseStepThatLooksNothingUpPushesNoRows) {
  // Rows looked up in the first step only: the servers' rows move once, as after a one-step job
  // (the first step's row gradients must not be pushed again with the later steps).
  auto first_only = StartCluster(SparseJob(SYNC, 1, 8));
  std::unique_ptr<TrainingSession> session = Session(*first_only, 0);
  Hooks hooks;
  hooks.look_up_rows = [](const Work& work) { return work.step == 0; };
  ASSERT_TRUE(Drive(session.get(), hooks).status.ok());
  JobSpec one_step = SparseJob(SYNC, 1, 8);
  one_step.set_max_steps(1);
  auto reference = StartCluster(one_step);
  ASSERT_TRUE(RunWorkers(*reference, {0})[0].status.ok());
  EXPECT_EQ(ServerRows(*first_only), ServerRows(*reference));
  auto fresh = StartCluster(SparseJob(SYNC, 1, 8));
  EXPECT_NE(ServerRows(*first_only), ServerRows(*fresh));
}

TEST(TrainingSessionTest, SparseStepRefusedByAMembershipChangeIsRecomputedAndAppliedOnce) {
  auto cluster = StartCluster(SparseJob(SYNC, 2, 4));
  std::unique_ptr<TrainingSession> session = Session(*cluster, 0);
  Driven driven;
  std::thread worker([&]() { driven = Drive(session.get()); });
  while (cluster->ps().calls("PushPull") < 2) absl::SleepFor(absl::Milliseconds(1));
  cluster->HeartbeatAndAdvance(absl::Seconds(4), /*silent=*/{1});
  worker.join();
  ASSERT_TRUE(driven.status.ok()) << driven.status;
  EXPECT_EQ(driven.recomputed, 1);
  ExpectSummaryExact(*cluster);
  auto one = StartCluster(SparseJob(SYNC, 1, 8));
  ASSERT_TRUE(RunWorkers(*one, {0})[0].status.ok());
  EXPECT_EQ(ServerRows(*cluster), ServerRows(*one));
}

// What each try of step 1 computed on: the weights, and (sparse jobs) table 0's rows.
struct Step1Tries {
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> rows;
  Hooks Recording() {
    Hooks hooks;
    hooks.on_step = [this](TrainingSession* session, const Work& work) {
      if (work.step != 1) return;
      weights.emplace_back(session->weights().begin(), session->weights().end());
      if (session->num_tables() > 0) rows.emplace_back(session->rows(0).begin(), session->rows(0).end());
    };
    return hooks;
  }
};

// Worker 1 dies in the middle of step 1's push: server 0 got its push (and applies step 1 once
// worker 0's arrives), server 1 never does. Worker 0's step 1 is then refused by server 1 when
// worker 1 is declared dead, and recomputed alone over the whole global batch while server 0 is
// a step ahead. Returns what worker 0's tries of step 1 computed on.
Step1Tries RunSyncJobWhereWorker1DiesBetweenItsPushes(InProcessCluster& cluster) {
  cluster.ps().set_fault_rule([](const InProcessPs::CallInfo& call) -> std::optional<InProcessPs::Fault> {
    if (call.push == nullptr || call.server != 1 || call.push->worker_rank() != 1 || call.push->step() != 1) {
      return std::nullopt;
    }
    return InProcessPs::Fault{absl::InternalError("worker 1 was killed"), InProcessPs::Fault::kBeforeServer};
  });
  std::unique_ptr<TrainingSession> s0 = Session(cluster, 0);
  std::unique_ptr<TrainingSession> s1 = Session(cluster, 1);
  Step1Tries tries;
  Driven d0, d1;
  std::thread t1([&]() { d1 = Drive(s1.get()); });
  std::thread t0([&]() { d0 = Drive(s0.get(), tries.Recording()); });
  t1.join();
  EXPECT_TRUE(absl::IsInternal(d1.status)) << d1.status;
  // Server 0 applied step 1 with both workers' pushes; server 1 holds worker 0's.
  for (int i = 0; i < 5000 && cluster.store(0).step() < 2; ++i) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(cluster.store(0).step(), 2);
  EXPECT_EQ(cluster.store(1).step(), 1);
  cluster.HeartbeatAndAdvance(absl::Seconds(4), /*silent=*/{1});
  t0.join();
  EXPECT_TRUE(d0.status.ok()) << d0.status;
  EXPECT_EQ(d0.recomputed, 1);
  return tries;
}

// What a one-worker job over the same global batches computed step 1 on.
Step1Tries OneWorkerStep1(const JobSpec& job) {
  auto one = StartCluster(job);
  std::unique_ptr<TrainingSession> session = Session(*one, 0);
  Step1Tries tries;
  EXPECT_TRUE(Drive(session.get(), tries.Recording()).status.ok());
  return tries;
}

TEST(TrainingSessionTest, SparseStepRecomputedWhileAnotherServerAppliedItReadsTheRowsOfItsFirstTry) {
  auto cluster = StartCluster(SparseJob(SYNC, 2, 4));
  const Step1Tries tries = RunSyncJobWhereWorker1DiesBetweenItsPushes(*cluster);
  const Step1Tries one = OneWorkerStep1(SparseJob(SYNC, 1, 8));
  ASSERT_EQ(tries.rows.size(), 2u);
  ASSERT_EQ(one.rows.size(), 1u);
  // The recomputed try read the rows step 1 began with, also those of server 0, which had
  // applied it: not rows that already carry its update.
  EXPECT_EQ(tries.rows[1], one.rows[0]);
  EXPECT_EQ(tries.weights[1], one.weights[0]);
  EXPECT_EQ(ServerRows(*cluster), ServerRows(*StartClusterAndRun(SparseJob(SYNC, 1, 8))));
}

TEST(TrainingSessionTest, OverlappedStepRecomputedWhileAnotherServerAppliedItComputesOnItsFirstWeights) {
  JobSpec job = TinyJob(SYNC, 2, 4);
  job.set_overlap(true);
  auto cluster = StartCluster(job);
  const Step1Tries tries = RunSyncJobWhereWorker1DiesBetweenItsPushes(*cluster);
  JobSpec alone = TinyJob(SYNC, 1, 8);
  alone.set_overlap(true);
  const Step1Tries one = OneWorkerStep1(alone);
  ASSERT_EQ(tries.weights.size(), 2u);
  ASSERT_EQ(one.weights.size(), 1u);
  // Server 0's answer to the first try (the weights after step 1) is not what the second try
  // computes on.
  EXPECT_EQ(tries.weights[1], one.weights[0]);
  EXPECT_EQ(cluster->ServerWeights(), OneWorkerWeights(SYNC, 8, /*overlap=*/true));
}

TEST(TrainingSessionTest, SparseAsyncLeaseOfADeadWorkerIsFinishedByAnotherAndEachBatchAppliedOnce) {
  auto cluster = StartCluster(SparseJob(ASYNC, 2, 4));
  const std::vector<float> init = ServerRows(*cluster);
  RunAsyncJobWhereWorker1DiesMidLease(*cluster);
  // SGD rows take each batch's gradient once, whatever the order: 2 epochs of every sample's
  // share (1/4 per batch of 4) at lr 0.5.
  const std::vector<uint64_t> keys = {0, 1, 2, 3, 4, 10, 11, 12};
  const std::vector<float> rows = ServerRows(*cluster);
  for (size_t k = 0; k < keys.size(); ++k) {
    for (int e = 0; e < 2; ++e) {
      double sum = 0;
      for (int64_t i = 0; i < kTrain; ++i) {
        for (uint64_t key : SampleKeys(i)) sum += key == keys[k] ? SampleGradient(i, e + 3) / 4.0 : 0.0;
      }
      EXPECT_NEAR(rows[k * 2 + e], init[k * 2 + e] - 0.5 * 2 * sum, 1e-5) << "key " << keys[k];
    }
  }
}

TEST(TrainingSessionTest, SyncWorkersTrainEverySampleOnceAndMatchOneWorkerWithTheWholeBatch) {
  auto cluster = StartCluster(TinyJob(SYNC, 2, 4));
  std::vector<Driven> driven = RunWorkers(*cluster, {0, 1});
  for (const Driven& d : driven) {
    ASSERT_TRUE(d.status.ok()) << d.status;
    EXPECT_EQ(d.applied, 8);  // 2 epochs x 4 global batches of 8
    EXPECT_EQ(d.recomputed, 0);
    EXPECT_THAT(d.batch_sizes, ::testing::Each(4u));
  }
  ExpectEachSampleOncePerEpoch(driven, 2);
  ExpectSummaryExact(*cluster);
  EXPECT_EQ(cluster->ServerWeights(), OneWorkerWeights(SYNC, 8));
}

TEST(TrainingSessionTest, SyncOverlapPushesLayerByLayerToTheSameModel) {
  JobSpec job = TinyJob(SYNC, 2, 4);
  job.set_overlap(true);
  auto cluster = StartCluster(job);
  std::vector<Driven> driven = RunWorkers(*cluster, {0, 1});
  for (const Driven& d : driven) ASSERT_TRUE(d.status.ok()) << d.status;
  ExpectEachSampleOncePerEpoch(driven, 2);
  ExpectSummaryExact(*cluster);
  EXPECT_GT(cluster->ps().calls("PushPull"), 0);
  EXPECT_EQ(cluster->ServerWeights(), OneWorkerWeights(SYNC, 8, /*overlap=*/false));
}

TEST(TrainingSessionTest, DelayedCallsAnsweredOutOfOrderChangeNothing) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "whole pushes");
    JobSpec job = TinyJob(SYNC, 2, 4);
    job.set_overlap(overlap);
    auto cluster = StartCluster(job);
    // Every call reaches its server 2 ms late, from a thread of its own: answers arrive out of
    // order and on other threads than the worker's.
    cluster->ps().set_delay(absl::Milliseconds(2));
    std::vector<Driven> driven = RunWorkers(*cluster, {0, 1});
    for (const Driven& d : driven) ASSERT_TRUE(d.status.ok()) << d.status;
    ExpectEachSampleOncePerEpoch(driven, 2);
    ExpectSummaryExact(*cluster);
    EXPECT_EQ(cluster->ServerWeights(), OneWorkerWeights(SYNC, 8));
  }
}

TEST(TrainingSessionTest, StepRefusedByAMembershipChangeIsRecomputedUnderTheNewView) {
  auto cluster = StartCluster(TinyJob(SYNC, 2, 4));
  // Worker 1 registered but never trains: worker 0's first step waits for it until it is
  // declared dead, then is refused (ABORTED) and recomputed over the whole global batch.
  std::unique_ptr<TrainingSession> session = Session(*cluster, 0);
  Driven driven;
  std::thread worker([&]() { driven = Drive(session.get()); });
  while (cluster->ps().calls("PushPull") < 2) absl::SleepFor(absl::Milliseconds(1));
  cluster->HeartbeatAndAdvance(absl::Seconds(4), /*silent=*/{1});
  worker.join();
  ASSERT_TRUE(driven.status.ok()) << driven.status;
  EXPECT_EQ(driven.recomputed, 1);
  ASSERT_GE(driven.batch_sizes.size(), 2u);
  EXPECT_EQ(driven.batch_sizes[0], 4u);  // its half of global batch 0 under the first view
  EXPECT_EQ(driven.batch_sizes[1], 8u);  // the whole of it, alone
  ExpectEachSampleOncePerEpoch({driven}, 2);
  ExpectSummaryExact(*cluster);
  EXPECT_EQ(cluster->ServerWeights(), OneWorkerWeights(SYNC, 8));
}

// Server 0 takes worker 0's first push (or part) of step 3, but the worker hears "connection
// reset" (`when`: as the server answers, or at once). `pushes` counts worker 0's pushes of step 3
// to server 0.
void ResetWorker0sFirstPushOfStep3(InProcessCluster& cluster, InProcessPs::Fault::When when, std::atomic<int>* pushes) {
  cluster.ps().set_fault_rule([when, pushes](const InProcessPs::CallInfo& call) -> std::optional<InProcessPs::Fault> {
    if (call.push == nullptr || call.server != 0 || call.push->worker_rank() != 0 || call.push->step() != 3) {
      return std::nullopt;
    }
    if (pushes->fetch_add(1) > 0) return std::nullopt;
    return InProcessPs::Fault{absl::UnavailableError("connection reset"), when};
  });
}

TEST(TrainingSessionTest, LostPushAnswerIsRetriedAndAppliedOnce) {
  using Fault = InProcessPs::Fault;
  for (Fault::When when : {Fault::kWhenServerAnswers, Fault::kWhileServerHolds}) {
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(absl::StrCat(overlap ? "overlap" : "whole pushes", ", fault ", when));
      JobSpec job = TinyJob(SYNC, 2, 4);
      job.set_overlap(overlap);
      auto cluster = StartCluster(job);
      std::atomic<int> pushes{0};
      ResetWorker0sFirstPushOfStep3(*cluster, when, &pushes);
      std::vector<Driven> driven = RunWorkers(*cluster, {0, 1});
      for (const Driven& d : driven) ASSERT_TRUE(d.status.ok()) << d.status;
      EXPECT_GE(pushes.load(), 2);  // the retry went through
      ExpectEachSampleOncePerEpoch(driven, 2);
      ExpectSummaryExact(*cluster);
      EXPECT_EQ(cluster->ServerWeights(), OneWorkerWeights(SYNC, 8));
    }
  }
}

TEST(TrainingSessionTest, PushRetriedWhileItsStepIsStillOpenIsTakenAsARetry) {
  using Fault = InProcessPs::Fault;
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "whole pushes");
    JobSpec job = TinyJob(SYNC, 2, 4);
    job.set_overlap(overlap);
    job.set_num_servers(1);  // one call a step: nothing else of the step is parked elsewhere
    auto cluster = StartCluster(job);
    // Worker 0's push of step 3 reaches the server and its connection resets at once; worker 1
    // holds step 3 back until worker 0 has sent it again, so the server still holds the first
    // copy when the second arrives.
    std::atomic<int> pushes{0};
    ResetWorker0sFirstPushOfStep3(*cluster, Fault::kWhileServerHolds, &pushes);
    std::map<int, Hooks> hooks;
    hooks[1].before_step = [&](const Work& work, const Driven&) {
      while (work.step == 3 && pushes.load() < 2) absl::SleepFor(absl::Milliseconds(1));
      return true;
    };
    std::vector<Driven> driven = RunWorkers(*cluster, {0, 1}, hooks);
    for (const Driven& d : driven) ASSERT_TRUE(d.status.ok()) << d.status;
    ExpectEachSampleOncePerEpoch(driven, 2);
    ExpectSummaryExact(*cluster);
    EXPECT_EQ(cluster->ServerWeights(), OneWorkerWeights(SYNC, 8));
  }
}

TEST(TrainingSessionTest, LeaveFinishesTheStepThenLeavesAndTheOthersTakeOver) {
  auto cluster = StartCluster(TinyJob(SYNC, 2, 4));
  std::atomic<bool> leave{false};
  std::unique_ptr<TrainingSession> s0 = Session(*cluster, 0);
  std::unique_ptr<TrainingSession> s1 = Session(*cluster, 1, &leave);
  Hooks leaving;
  leaving.before_step = [&](const Work&, const Driven& d) {
    if (d.applied == 3) leave.store(true);  // SIGTERM during step 3
    return true;
  };
  Driven d0, d1;
  std::thread t0([&]() { d0 = Drive(s0.get()); });
  std::thread t1([&]() { d1 = Drive(s1.get(), leaving); });
  t0.join();
  t1.join();
  ASSERT_TRUE(d0.status.ok()) << d0.status;
  ASSERT_TRUE(d1.status.ok()) << d1.status;
  EXPECT_TRUE(d1.left);
  EXPECT_FALSE(d0.left);
  EXPECT_EQ(d1.applied, 4);  // it finished the step it was in
  ExpectEachSampleOncePerEpoch({d0, d1}, 2);
  ExpectSummaryExact(*cluster);
  EXPECT_EQ(cluster->ServerWeights(), OneWorkerWeights(SYNC, 8));
}

TEST(TrainingSessionTest, AsyncLeaseOfADeadWorkerIsFinishedByAnotherAndEachBatchAppliedOnce) {
  auto cluster = StartCluster(TinyJob(ASYNC, 2, 4));
  RunAsyncJobWhereWorker1DiesMidLease(*cluster);
  // Every batch of both epochs was applied once on each server: 2 x 8 updates.
  EXPECT_EQ(cluster->store(0).step(), 16);
  EXPECT_EQ(cluster->store(1).step(), 16);
}

TEST(TrainingSessionTest, DeadServerWithoutCopiesOrCheckpointsEndsTheAsyncJob) {
  auto cluster = StartCluster(TinyJob(ASYNC, 1, 4));
  std::unique_ptr<TrainingSession> session = Session(*cluster, 0);
  Hooks kill;
  kill.before_step = [&](const Work&, const Driven& d) {
    if (d.applied == 2) cluster->ps().Kill(1);
    return true;
  };
  Driven d = Drive(session.get(), kill);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kUnavailable) << d.status;
  EXPECT_THAT(d.status.message(), ::testing::HasSubstr("server 1 is dead"));
  EXPECT_EQ(d.applied, 2);
}

TEST(TrainingSessionTest, SyncStepThatKeepsFailingGivesUpAfterTheMembershipTimeout) {
  auto cluster = StartCluster(TinyJob(SYNC, 1, 4));
  cluster->ps().Kill(1);  // dead, but never declared dead: the step cannot complete
  std::unique_ptr<TrainingSession> session = Session(*cluster, 0);
  Driven d = Drive(session.get());
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDeadlineExceeded) << d.status;
  EXPECT_THAT(d.status.message(), ::testing::HasSubstr("kept failing"));
}

TEST(TrainingSessionTest, FailedJobEndsTheSessionWithAborted) {
  auto cluster = StartCluster(TinyJob(ASYNC, 1, 4));
  std::unique_ptr<TrainingSession> session = Session(*cluster, 0);
  Hooks fail;
  fail.before_step = [&](const Work&, const Driven& d) {
    if (d.applied == 2) cluster->core().Fail(absl::InternalError("a server broke"));
    return true;
  };
  Driven d = Drive(session.get(), fail);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kAborted) << d.status;
  EXPECT_THAT(d.status.message(), ::testing::HasSubstr("a server broke"));
}

TEST(TrainingSessionTest, GradientLongerThanClipGradNormIsScaledToItBeforeThePush) {
  JobSpec job = TinyJob(SYNC, 1, 8);
  job.mutable_optimizer()->set_clip_grad_norm(0.25f);
  auto cluster = StartCluster(job);
  std::unique_ptr<TrainingSession> session = Session(*cluster, 0);
  Work work;
  ASSERT_TRUE(session->Next(&work).ok());
  ASSERT_EQ(work.kind, Work::kTrain);
  const std::vector<float> before(session->weights().begin(), session->weights().end());
  EXPECT_EQ(*session->BeginStep(), nullptr);  // clipping needs the whole gradient: no overlap
  absl::Span<float> grad = session->gradient();
  for (size_t k = 0; k < grad.size(); ++k) grad[k] = k % 2 == 0 ? 0.5f : -0.5f;  // norm sqrt(8)/2
  auto applied = session->EndStep(model::BatchStats{});
  ASSERT_TRUE(applied.ok()) << applied.status();
  const double scale = 0.25 / (std::sqrt(8.0) / 2 + 1e-6);
  const std::vector<float> after = cluster->ServerWeights();
  for (size_t k = 0; k < after.size(); ++k) {
    const float g = static_cast<float>((k % 2 == 0 ? 0.5 : -0.5) * scale);
    EXPECT_FLOAT_EQ(after[k], before[k] - 0.5f * g) << k;  // SGD, lr 0.5
  }
}

TEST(TrainingSessionTest, StepCallsOutOfOrderAreRefusedNotFatal) {
  auto cluster = StartCluster(TinyJob(SYNC, 1, 4));
  std::unique_ptr<TrainingSession> session = Session(*cluster, 0);
  EXPECT_EQ(session->BeginStep().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(session->EndStep(model::BatchStats{}).status().code(), absl::StatusCode::kFailedPrecondition);
  Work work;
  ASSERT_TRUE(session->Next(&work).ok());
  EXPECT_EQ(session->EndStep(model::BatchStats{}).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(session->BeginStep().ok());
  EXPECT_EQ(session->BeginStep().status().code(), absl::StatusCode::kFailedPrecondition);
  // The step is still the one handed out: it completes as usual.
  auto applied = session->EndStep(model::BatchStats{});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, TrainingSession::StepResult::kApplied);
}

TEST(TrainingSessionTest, ScoresReportedWithEachEvaluationLeaseGiveTheWholeTestSetsAuc) {
  for (Mode mode : {SYNC, ASYNC}) {
    auto cluster = StartCluster(TinyJob(mode, 2, 4));
    Hooks ctr;
    ctr.report_scores = true;
    // The first evaluation report, whichever worker makes it, is tried first one score short:
    // refused by the worker itself, and the lease is still to be reported.
    std::atomic<bool> tried{false};
    ctr.before_evaluation_report = [&](TrainingSession* session, const Work& work) {
      if (tried.exchange(true)) return;
      data::ScoreHistogram short_scores;
      for (int64_t i = work.begin + 1; i < work.end; ++i) ASSERT_TRUE(short_scores.Add(0.5, true).ok());
      const absl::Status status = session->ReportEvaluation({0, 0, work.end - work.begin}, &short_scores);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find(absl::StrCat(work.end - work.begin - 1, " scores for ", work.end - work.begin,
                                                   " samples, expected one per sample")),
                absl::string_view::npos)
          << status;
    };
    std::vector<Driven> driven = RunWorkers(*cluster, {0, 1}, {{0, ctr}, {1, ctr}});
    EXPECT_TRUE(tried);
    for (const Driven& d : driven) ASSERT_TRUE(d.status.ok()) << d.status;
    ExpectEachSampleOncePerEpoch(driven, 2);
    const JobStatus status = cluster->core().Status();
    EXPECT_EQ(status.state(), FINISHED) << status.failure();
    ASSERT_EQ(status.epochs_done_size(), 2);
    for (const EpochSummary& e : status.epochs_done()) {
      // Each clicked sample outranks the unclicked ones below it: 1 + 3 + 4 + 6 of the 4 x 6 pairs,
      // however the test set was split into leases and among the workers.
      ASSERT_TRUE(e.has_test_auc()) << "epoch " << e.epoch();
      EXPECT_DOUBLE_EQ(e.test_auc(), 14.0 / 24) << "epoch " << e.epoch();
      EXPECT_EQ(e.test_auc_error_bound(), 0) << "epoch " << e.epoch();
      EXPECT_DOUBLE_EQ(e.test_loss(), 4.5) << "epoch " << e.epoch();
    }
    const std::string summary = cluster->core().SummaryJson();
    EXPECT_NE(summary.find("\"final_test_auc\": 0.5833333333,"), std::string::npos) << summary;
    EXPECT_NE(summary.find("\"final_test_logloss\": 4.5,"), std::string::npos) << summary;
  }
}

TEST(TrainingSessionTest, EvaluationReportWithoutALeaseIsRefused) {
  auto cluster = StartCluster(TinyJob(SYNC, 1, 4));
  std::unique_ptr<TrainingSession> session = Session(*cluster, 0);
  const absl::Status status = session->ReportEvaluation(model::BatchStats{});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TrainingSessionTest, GradientClippingLeavesAveragedTensorsOutOfTheNormAndUnscaled) {
  // "b" is averaged: its part of the push is (pulled - local), applied by the servers at lr 1.
  JobSpec job = TinyJob(SYNC, 1, 4);
  job.mutable_optimizer()->set_clip_grad_norm(2.5f);
  auto created = InProcessCluster::Create(job, TinyParams(), kTrain, kTest, /*averaged=*/{"b"});
  ASSERT_TRUE(created.ok()) << created.status();
  InProcessCluster& cluster = **created;
  ASSERT_TRUE(cluster.Start().ok());
  ASSERT_TRUE(cluster.core().View().shard_map().tensors(1).averaged());
  std::unique_ptr<TrainingSession> session = Session(cluster, 0);
  Work work;
  ASSERT_TRUE(session->Next(&work).ok());
  ASSERT_EQ(work.kind, Work::kTrain);
  const std::vector<float> before = cluster.ServerWeights();
  EXPECT_EQ(before[6], 0.0f);                 // "b" starts at zeros
  ASSERT_EQ(*session->BeginStep(), nullptr);  // clipping turns overlap off
  // "w": norm 5, clipped to 2.5; "b": local values -100 and 40 (pulled 0), far longer.
  const std::vector<float> grad = {3, 4, 0, 0, 0, 0, 100, -40};
  std::copy(grad.begin(), grad.end(), session->gradient().begin());
  model::BatchStats stats;
  stats.loss_sum = 1;
  absl::StatusOr<TrainingSession::StepResult> result = session->EndStep(stats);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(*result, TrainingSession::StepResult::kApplied);
  const std::vector<float> after = cluster.ServerWeights();
  const float scale = static_cast<float>(2.5 / (5.0 + 1e-6));
  for (int k = 0; k < 6; ++k) EXPECT_FLOAT_EQ(after[k], before[k] - 0.5f * grad[k] * scale) << k;
  EXPECT_EQ(after[6], -100.0f);
  EXPECT_EQ(after[7], 40.0f);
  EXPECT_EQ(std::vector<float>(session->weights().begin(), session->weights().end()), after);
}

TEST(TrainingSessionTest, ParamsThatDoNotMatchTheShardMapAreRefused) {
  auto cluster = StartCluster(TinyJob(SYNC, 1, 4));
  worker::SessionOptions options = cluster->SessionOptionsFor(0);
  options.params[1].shape = {3};
  options.params[1].num_elements = 3;
  auto session = TrainingSession::Create(options, &cluster->scheduler(), &cluster->ps());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument) << session.status();
}

}  // namespace
}  // namespace pstrain::in_process
