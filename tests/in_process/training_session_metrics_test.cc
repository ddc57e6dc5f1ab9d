// The worker library's metrics and the progress reports' staleness and traffic
// (worker/worker_metrics.h), on a whole job in one process (tests/in_process): what a scrape of a
// worker and the scheduler's sums of its reports would show.
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "tests/in_process/in_process_cluster.h"
#include "tests/in_process/tiny_job.h"
#include "worker/training_session.h"
#include "worker/worker_metrics.h"

namespace pstrain::in_process {
namespace {

using worker::TrainingSession;
using Work = TrainingSession::Work;

constexpr int64_t kTrain = 32;
constexpr int64_t kTest = 8;

// One worker: its metrics, its session, and what its loop did.
struct Worker {
  metrics::Registry registry;
  std::unique_ptr<worker::WorkerMetrics> metrics;
  std::unique_ptr<TrainingSession> session;
  std::atomic<int64_t> applied{0};
  absl::Status status;
};

// Drives a session with a gradient of 1/8 per element and a loss of 1 per sample. `before_step`
// runs before each gradient is computed.
void Drive(Worker* w, const std::function<void()>& before_step = {}) {
  Work work;
  while (true) {
    w->status = w->session->Next(&work);
    if (!w->status.ok() || work.kind == Work::kDone) return;
    if (work.kind == Work::kEvaluate) {
      model::BatchStats stats;
      stats.samples = work.end - work.begin;
      w->status = w->session->ReportEvaluation(stats);
      if (!w->status.ok()) return;
      continue;
    }
    if (before_step) before_step();
    absl::StatusOr<model::GradientSink*> sink = w->session->BeginStep();
    if (!sink.ok()) {
      w->status = sink.status();
      return;
    }
    for (float& g : w->session->gradient()) g = 0.125f;
    model::BatchStats stats;
    stats.samples = static_cast<int64_t>(work.samples.size());
    stats.loss_sum = static_cast<double>(stats.samples);
    absl::StatusOr<TrainingSession::StepResult> result = w->session->EndStep(stats);
    if (!result.ok()) {
      w->status = result.status();
      return;
    }
    if (*result == TrainingSession::StepResult::kApplied) ++w->applied;
  }
}

std::vector<std::unique_ptr<Worker>> NewWorkers(InProcessCluster& cluster, int n) {
  std::vector<std::unique_ptr<Worker>> workers;
  for (int rank = 0; rank < n; ++rank) {
    auto w = std::make_unique<Worker>();
    w->metrics = std::make_unique<worker::WorkerMetrics>(&w->registry, 2);
    worker::SessionOptions options = cluster.SessionOptionsFor(rank);
    options.metrics = w->metrics.get();
    auto session = TrainingSession::Create(options, &cluster.scheduler(), &cluster.ps());
    EXPECT_TRUE(session.ok()) << session.status();
    w->session = std::move(session).value();
    workers.push_back(std::move(w));
  }
  return workers;
}

// Sums of one worker's reports.
struct Sums {
  int64_t steps = 0;
  int64_t samples = 0;
  int64_t staleness_pulls = 0;
  int64_t staleness_sum = 0;
  int64_t staleness_max = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
};

Sums SumReports(InProcessCluster& cluster, int rank) {
  Sums sums;
  for (const ProgressReport& r : cluster.scheduler().reports()) {
    if (r.worker_rank() != rank) continue;
    sums.steps += r.train().steps();
    sums.samples += r.train().samples();
    sums.staleness_pulls += r.staleness().pulls();
    sums.staleness_sum += r.staleness().sum();
    sums.staleness_max = std::max(sums.staleness_max, r.staleness().max());
    sums.bytes_sent += r.traffic().bytes_sent();
    sums.bytes_received += r.traffic().bytes_received();
  }
  return sums;
}

// A fake transport's byte counts: each call's request header size sent, 100 bytes received.
void CountTrafficOfEveryCall(InProcessCluster& cluster, std::vector<std::unique_ptr<Worker>>& workers) {
  cluster.ps().set_fault_rule([&workers](const InProcessPs::CallInfo& call) -> std::optional<InProcessPs::Fault> {
    int rank = -1;
    int64_t bytes = 0;
    if (call.push != nullptr) {
      rank = call.push->worker_rank();
      bytes = static_cast<int64_t>(call.push->ByteSizeLong());
    } else if (call.pull != nullptr) {
      rank = call.pull->worker_rank();
      bytes = static_cast<int64_t>(call.pull->ByteSizeLong());
    }
    if (rank >= 0 && rank < static_cast<int>(workers.size())) {
      workers[rank]->metrics->traffic()->Sent(call.server, bytes);
      workers[rank]->metrics->traffic()->Received(call.server, 100);
    }
    return std::nullopt;
  });
}

TEST(TrainingSessionMetricsTest, SyncPullsAreNeverStaleAndReportsAddUpToTheCounters) {
  auto cluster = InProcessCluster::Create(TinyJob(SYNC, 2, 4, 0.125f), TinyParams(), kTrain, kTest);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->Start().ok());
  auto workers = NewWorkers(**cluster, 2);
  CountTrafficOfEveryCall(**cluster, workers);
  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&w] { Drive(w.get()); });
  for (std::thread& t : threads) t.join();

  for (int rank = 0; rank < 2; ++rank) {
    Worker& w = *workers[rank];
    ASSERT_TRUE(w.status.ok()) << w.status;
    const Sums sums = SumReports(**cluster, rank);
    // SYNC: every worker trains on every global step (2 epochs x 32 samples / global batch 8).
    EXPECT_EQ(w.applied, 8);
    EXPECT_EQ(sums.steps, 8);
    EXPECT_EQ(sums.samples, 32);
    EXPECT_EQ(sums.staleness_pulls, 0);
    EXPECT_EQ(sums.staleness_sum, 0);
    EXPECT_EQ(w.metrics->traffic()->totals().bytes_sent, sums.bytes_sent);
    EXPECT_EQ(w.metrics->traffic()->totals().bytes_received, sums.bytes_received);
    EXPECT_GT(sums.bytes_sent, 0);
    const std::string text = w.registry.Render();
    EXPECT_NE(text.find("pstrain_worker_steps_total 8\n"), std::string::npos) << text;
    EXPECT_NE(text.find("pstrain_worker_samples_total 32\n"), std::string::npos) << text;
    EXPECT_NE(text.find("pstrain_worker_step_duration_seconds_count 8\n"), std::string::npos) << text;
    EXPECT_NE(text.find("pstrain_worker_step_seconds_count{phase=\"wait\"} 8\n"), std::string::npos) << text;
    EXPECT_NE(text.find("pstrain_worker_train_loss 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("pstrain_worker_epoch 1\n"), std::string::npos) << text;
    // SYNC has no staleness: none was observed.
    EXPECT_NE(text.find("pstrain_worker_pull_staleness_count 0\n"), std::string::npos) << text;
  }
}

TEST(TrainingSessionMetricsTest, AsyncWorkersTakingTurnsSeeEachOthersUpdatesAsStaleness) {
  auto cluster = InProcessCluster::Create(TinyJob(ASYNC, 2, 4, 0.125f), TinyParams(), kTrain, kTest);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->Start().ok());
  auto workers = NewWorkers(**cluster, 2);
  // Each worker, before its next step, waits (a little) for the other to apply one: their pushes
  // interleave, so most push-pulls find an update of the other worker since the last pull.
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      Worker& me = *workers[rank];
      Worker& other = *workers[1 - rank];
      int64_t seen = 0;
      Drive(&me, [&] {
        const absl::Time give_up = absl::Now() + absl::Milliseconds(200);
        while (other.applied <= seen && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
        seen = other.applied;
      });
    });
  }
  for (std::thread& t : threads) t.join();

  int64_t stale = 0;
  int64_t pushes = 0;
  for (int rank = 0; rank < 2; ++rank) {
    Worker& w = *workers[rank];
    ASSERT_TRUE(w.status.ok()) << w.status;
    const Sums sums = SumReports(**cluster, rank);
    EXPECT_EQ(sums.steps, w.applied);
    // One staleness per shard of each push-pull (every shard was pulled at the start).
    EXPECT_EQ(sums.staleness_pulls, 2 * w.applied);
    EXPECT_LE(sums.staleness_max, 16);
    const std::string text = w.registry.Render();
    EXPECT_NE(text.find("pstrain_worker_pull_staleness_count " + std::to_string(sums.staleness_pulls) + "\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("pstrain_worker_pull_staleness_sum " + std::to_string(sums.staleness_sum) + "\n"),
              std::string::npos)
        << text;
    stale += sums.staleness_sum;
    pushes += w.applied;
  }
  // 2 epochs x 8 batches, each applied once.
  EXPECT_EQ(pushes, 16);
  EXPECT_GT(stale, 0);
}

}  // namespace
}  // namespace pstrain::in_process
