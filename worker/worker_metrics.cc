#include "worker/worker_metrics.h"

namespace pstrain::worker {

std::vector<double> WorkerMetrics::StalenessBuckets() {
  std::vector<double> bounds = {0};
  for (double b = 1; b <= 1024; b *= 2) bounds.push_back(b);
  return bounds;
}

WorkerMetrics::WorkerMetrics(metrics::Registry* registry, int num_servers)
    : traffic_(registry, num_servers),
      duration_(registry
                    ->AddHistogram("pstrain_worker_step_duration_seconds",
                                   "Whole applied training steps (compute + push + wait + pull)", {},
                                   metrics::LatencyBuckets())
                    .Get()),
      steps_(registry->AddCounter("pstrain_worker_steps_total", "Training steps this worker had applied").Get()),
      samples_(registry->AddCounter("pstrain_worker_samples_total", "Samples of this worker's applied steps").Get()),
      samples_per_second_(registry
                              ->AddGauge("pstrain_worker_samples_per_second",
                                         "Training samples per second over the last 5 to 10 seconds (0 when not "
                                         "training)")
                              .Get()),
      loss_(registry
                ->AddGauge("pstrain_worker_train_loss",
                           "Mean training loss of this worker's samples over the last 5 to 10 seconds of training")
                .Get()),
      epoch_(registry->AddGauge("pstrain_worker_epoch", "The data epoch this worker trains").Get()),
      staleness_(registry
                     ->AddHistogram("pstrain_worker_pull_staleness",
                                    "ASYNC/SSP: updates of other workers a shard applied between this worker's pull "
                                    "of it and its next push (per shard and push)",
                                    {}, StalenessBuckets())
                     .Get()) {
  metrics::HistogramFamily& phases = registry->AddHistogram(
      "pstrain_worker_step_seconds",
      "Where applied training steps spent their time: compute (forward and backward, less overlapped sending), "
      "push (encoding and sending), wait (for the servers' answers), pull (installing the weights)",
      {"phase"}, metrics::LatencyBuckets());
  phases_ = {phases.With({"compute"}), phases.With({"push"}), phases.With({"wait"}), phases.With({"pull"})};
}

void WorkerMetrics::StepApplied(const StepTimes& times, int64_t samples, double loss_sum, absl::Time now) {
  const double split[4] = {times.compute_seconds(), times.push_seconds(), times.wait_seconds(), times.pull_seconds()};
  double whole = 0;
  for (int i = 0; i < 4; ++i) {
    phases_[i]->Observe(split[i]);
    whole += split[i];
  }
  duration_->Observe(whole);
  steps_->Increment();
  samples_->Add(static_cast<double>(samples));

  // Windows split time at step ends, so each step's samples fall into the one it ended in.
  if (current_.start == absl::InfinitePast()) {
    current_.start = now - absl::Seconds(whole);
  } else if (last_end_ - current_.start >= kWindow) {
    previous_ = current_;
    current_ = Window{last_end_, 0, 0};
  }
  last_end_ = now;
  current_.samples += samples;
  current_.loss_sum += loss_sum;
  const absl::Time from = previous_.start != absl::InfinitePast() ? previous_.start : current_.start;
  const int64_t n = previous_.samples + current_.samples;
  const double seconds = absl::ToDoubleSeconds(now - from);
  if (seconds > 0) samples_per_second_->Set(static_cast<double>(n) / seconds);
  if (n > 0) loss_->Set((previous_.loss_sum + current_.loss_sum) / static_cast<double>(n));
}

void WorkerMetrics::Idle() {
  samples_per_second_->Set(0);
  // The next step starts a fresh window: the idle time is no part of the training rate.
  previous_ = Window();
  current_ = Window();
}

}  // namespace pstrain::worker
