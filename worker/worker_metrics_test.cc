#include "worker/worker_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "common/metrics.h"
#include "worker/pull_staleness.h"
#include "worker/traffic_meter.h"

namespace pstrain::worker {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(PullStalenessTest, CountsOtherWorkersUpdatesBetweenAPullAndTheNextPush) {
  PullStaleness staleness(2);
  staleness.Pulled(0, 10);
  staleness.Pulled(1, 10);
  // Shard 0 applied only this push: nothing of others in between.
  EXPECT_EQ(staleness.PushPulled(0, 11), 0);
  // Shard 1 applied 3 updates of others, then this push.
  EXPECT_EQ(staleness.PushPulled(1, 14), 3);
  // From the last answer on: 2 of others.
  EXPECT_EQ(staleness.PushPulled(1, 17), 2);
}

TEST(PullStalenessTest, RepeatedBatchOrRestoredServerIsNotNegative) {
  PullStaleness staleness(1);
  staleness.Pulled(0, 20);
  EXPECT_EQ(staleness.PushPulled(0, 20), 0);  // a repeat the server did not apply again
  EXPECT_EQ(staleness.PushPulled(0, 5), 0);   // restored from an older checkpoint
  EXPECT_EQ(staleness.PushPulled(0, 8), 2);   // and counting from there
}

TEST(PullStalenessTest, ShardNeverPulledHasNoStaleness) {
  PullStaleness staleness(1);
  EXPECT_FALSE(staleness.PushPulled(0, 4).has_value());
  EXPECT_EQ(staleness.PushPulled(0, 6), 1);
}

TEST(TrafficMeterTest, TotalsAreTheSumsOfTheServersCounters) {
  metrics::Registry registry;
  TrafficMeter meter(&registry, 2);
  meter.Sent(0, 100, 40);
  meter.Sent(1, 50);
  meter.Sent(3, 7);  // a rank beyond the first view
  meter.Received(1, 1000);
  meter.Retried(absl::StatusCode::kResourceExhausted);
  meter.Retried(absl::StatusCode::kResourceExhausted);
  const TrafficMeter::Totals totals = meter.totals();
  EXPECT_EQ(totals.bytes_sent, 157);
  EXPECT_EQ(totals.bytes_received, 1000);
  EXPECT_EQ(totals.compression_saved_bytes, 40);
  const std::string text = registry.Render();
  EXPECT_TRUE(Has(text, "pstrain_worker_sent_bytes_total{server=\"0\"} 100")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_sent_bytes_total{server=\"1\"} 50")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_sent_bytes_total{server=\"3\"} 7")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_received_bytes_total{server=\"0\"} 0")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_received_bytes_total{server=\"1\"} 1000")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_compression_saved_bytes_total 40")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_retries_total{code=\"RESOURCE_EXHAUSTED\"} 2")) << text;
}

StepTimes OneStep(double compute, double push, double wait, double pull) {
  StepTimes t;
  t.set_steps(1);
  t.set_compute_seconds(compute);
  t.set_push_seconds(push);
  t.set_wait_seconds(wait);
  t.set_pull_seconds(pull);
  return t;
}

TEST(WorkerMetricsTest, StepsFillThePhaseHistogramsAndTheWholeStep) {
  metrics::Registry registry;
  WorkerMetrics m(&registry, 1);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  m.StepApplied(OneStep(0.5, 0.25, 0.125, 0.125), 10, 5.0, t0 + absl::Seconds(1));
  m.StepApplied(OneStep(0.5, 0.25, 0.125, 0.125), 10, 15.0, t0 + absl::Seconds(2));
  const std::string text = registry.Render();
  EXPECT_TRUE(Has(text, "pstrain_worker_steps_total 2")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_samples_total 20")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_step_duration_seconds_count 2")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_step_duration_seconds_sum 2")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_step_seconds_sum{phase=\"compute\"} 1")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_step_seconds_sum{phase=\"push\"} 0.5")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_step_seconds_count{phase=\"pull\"} 2")) << text;
  // 20 samples from the first step's start (t0) to t0 + 2 s; loss 20 / 20.
  EXPECT_TRUE(Has(text, "pstrain_worker_samples_per_second 10")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_train_loss 1")) << text;
}

TEST(WorkerMetricsTest, RateCoversTheLastWindowsAndDropsToZeroWhenIdle) {
  metrics::Registry registry;
  WorkerMetrics m(&registry, 1);
  metrics::Gauge* rate = registry.AddGauge("pstrain_worker_samples_per_second", "").Get();
  metrics::Gauge* loss = registry.AddGauge("pstrain_worker_train_loss", "").Get();
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  // 100 samples a second with loss 3 for 20 s, then 10 a second with loss 1.
  int64_t s = 0;
  for (; s < 20; ++s) m.StepApplied(OneStep(1, 0, 0, 0), 100, 300, t0 + absl::Seconds(s + 1));
  EXPECT_DOUBLE_EQ(rate->value(), 100);
  EXPECT_DOUBLE_EQ(loss->value(), 3);
  for (; s < 40; ++s) m.StepApplied(OneStep(1, 0, 0, 0), 10, 10, t0 + absl::Seconds(s + 1));
  // The windows (5 to 10 s) hold only the slow steps now.
  EXPECT_DOUBLE_EQ(rate->value(), 10);
  EXPECT_DOUBLE_EQ(loss->value(), 1);
  m.Idle();
  EXPECT_EQ(rate->value(), 0);
}

TEST(WorkerMetricsTest, StalenessBucketsArePowersOfTwoFromZero) {
  const std::vector<double> b = WorkerMetrics::StalenessBuckets();
  ASSERT_GE(b.size(), 4u);
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[1], 1);
  EXPECT_EQ(b[2], 2);
  EXPECT_EQ(b[3], 4);
  metrics::Registry registry;
  WorkerMetrics m(&registry, 1);
  m.Staleness(0);
  m.Staleness(3);
  const std::string text = registry.Render();
  EXPECT_TRUE(Has(text, "pstrain_worker_pull_staleness_bucket{le=\"0\"} 1")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_pull_staleness_bucket{le=\"2\"} 1")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_pull_staleness_bucket{le=\"4\"} 2")) << text;
  EXPECT_TRUE(Has(text, "pstrain_worker_pull_staleness_sum 3")) << text;
}

}  // namespace
}  // namespace pstrain::worker
