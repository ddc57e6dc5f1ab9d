// pstrain-serve's Prometheus metrics (common/metrics.h): which series exist and the calls that
// update them. Plain C++, no gRPC.
//
//   series (constant label role="serving")              updated
//   pstrain_serving_requests_total{method}              handler start
//   pstrain_serving_request_duration_seconds{method}    answer, OK or not
//   pstrain_serving_refused_requests_total{cause}       every non-OK answer (the code, snake case)
//   pstrain_serving_looked_up_keys_total                keys of answered Lookups
//   pstrain_serving_loads_total{result}                 each version loaded (ok) or a poll that
//                                                       failed (error)
//   pstrain_serving_load_duration_seconds               reading and indexing one new version
//   pstrain_serving_step                                scrape: the cut served (-1: none yet)
//   pstrain_serving_version_age_seconds                 scrape: since the version was loaded
//   pstrain_serving_steps_behind                        each poll: the newest cut on disk less the
//                                                       cut served (0: current)
//   pstrain_serving_table_rows{table}                   scrape: rows of the version served
//
// Thread safety: every method may be called from any thread (relaxed atomics on cached series).
#ifndef PSTRAIN_SERVING_SERVING_METRICS_H_
#define PSTRAIN_SERVING_SERVING_METRICS_H_

#include <array>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"

namespace pstrain::serving {

class ServedModel;

enum class ServingMethod { kLookup, kPredict, kGetModelInfo };
inline constexpr int kNumServingMethods = 3;

class ServingMetrics {
 public:
  // Registers the families in `registry` (borrowed; must outlive this).
  explicit ServingMetrics(metrics::Registry* registry);

  void Started(ServingMethod method);
  void Answered(ServingMethod method, absl::Duration took, const absl::Status& status);
  void LookedUp(int64_t keys) { looked_up_->Add(static_cast<double>(keys)); }
  void Loaded(absl::Duration took);
  void LoadFailed() { load_errors_->Increment(); }
  void Behind(int64_t steps) { behind_->Set(static_cast<double>(steps)); }

  // The version served now, read at every scrape (returns null before the first).
  void SetSource(std::function<std::shared_ptr<const ServedModel>()> current);

 private:
  metrics::Registry* registry_;
  std::array<metrics::Counter*, kNumServingMethods> requests_{};
  std::array<metrics::Histogram*, kNumServingMethods> duration_{};
  metrics::CounterFamily* refused_;
  metrics::Counter* looked_up_;
  metrics::Counter* loads_;
  metrics::Counter* load_errors_;
  metrics::Gauge* load_duration_;
  metrics::Gauge* step_;
  metrics::Gauge* age_;
  metrics::Gauge* behind_;
  metrics::GaugeFamily* rows_;
};

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_SERVING_METRICS_H_
