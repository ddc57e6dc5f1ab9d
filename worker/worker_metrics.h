// The worker's Prometheus metrics (common/metrics.h), registered once and updated by the training
// session as steps are applied, plus its parameter traffic (worker/traffic_meter.h, which the
// transport updates). Names, for a scrape:
//
//   pstrain_worker_step_seconds{phase}          histogram: compute, push, wait, pull of each
//                                               applied step (DESIGN "Step time split")
//   pstrain_worker_step_duration_seconds        histogram: the whole step (the four phases)
//   pstrain_worker_steps_total                  applied steps (recomputed ones count once)
//   pstrain_worker_samples_total                samples of the applied steps
//   pstrain_worker_samples_per_second           over the last few seconds of training; 0 when done
//   pstrain_worker_train_loss                   mean training loss over the same window
//   pstrain_worker_epoch                        the data epoch being trained
//   pstrain_worker_pull_staleness               histogram, ASYNC/SSP: other workers' updates
//                                               between a shard's pull and this worker's next
//                                               push to it (worker/pull_staleness.h)
//   pstrain_worker_{sent,received}_bytes_total{server}, _compression_saved_bytes_total,
//   pstrain_worker_retries_total{code}          see worker/traffic_meter.h
//
// Thread safety: StepApplied, Staleness, SetEpoch and Done from one thread (the session's);
// traffic() from any; a scrape reads everything at any time.
#ifndef PSTRAIN_WORKER_WORKER_METRICS_H_
#define PSTRAIN_WORKER_WORKER_METRICS_H_

#include <array>
#include <cstdint>

#include "absl/time/time.h"
#include "common/metrics.h"
#include "proto/scheduler.pb.h"
#include "worker/traffic_meter.h"

namespace pstrain::worker {

class WorkerMetrics {
 public:
  // Registers the families on `registry` (borrowed; must outlive this object), with series for
  // servers 0 .. num_servers - 1 ready. The constant labels (role, rank) are the caller's.
  WorkerMetrics(metrics::Registry* registry, int num_servers);

  TrafficMeter* traffic() { return &traffic_; }

  // An applied step, at `now`: its time split (StepTimes of one step), samples and loss sum.
  void StepApplied(const StepTimes& times, int64_t samples, double loss_sum, absl::Time now);
  // One ASYNC/SSP push-pull's staleness.
  void Staleness(int64_t staleness) { staleness_->Observe(static_cast<double>(staleness)); }
  void SetEpoch(int epoch) { epoch_->Set(epoch); }
  // Training is over (or parked at a barrier, evaluating): no samples flow.
  void Idle();

  // The staleness histogram's bounds: 0, 1, 2, 4, ..., 1024.
  static std::vector<double> StalenessBuckets();

 private:
  // Samples and loss of the steps since `start`; two such windows back to back make the rate.
  struct Window {
    absl::Time start = absl::InfinitePast();
    int64_t samples = 0;
    double loss_sum = 0;
  };
  // How long one window lasts: the gauges cover the last one to two of them.
  static constexpr absl::Duration kWindow = absl::Seconds(5);

  TrafficMeter traffic_;
  std::array<metrics::Histogram*, 4> phases_;  // compute, push, wait, pull
  metrics::Histogram* const duration_;
  metrics::Counter* const steps_;
  metrics::Counter* const samples_;
  metrics::Gauge* const samples_per_second_;
  metrics::Gauge* const loss_;
  metrics::Gauge* const epoch_;
  metrics::Histogram* const staleness_;
  Window previous_;
  Window current_;
  absl::Time last_end_;  // of the last step counted
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_WORKER_METRICS_H_
