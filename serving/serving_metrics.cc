#include "serving/serving_metrics.h"

#include <glog/logging.h>

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "serving/served_model.h"

namespace pstrain::serving {
namespace {

constexpr const char* kMethodNames[kNumServingMethods] = {"Lookup", "Predict", "GetModelInfo"};

}  // namespace

ServingMetrics::ServingMetrics(metrics::Registry* registry) : registry_(registry) {
  CHECK(registry != nullptr);
  auto& requests =
      registry->AddCounter("pstrain_serving_requests_total",
                           "Calls to the serving service by method, counted when their handler starts", {"method"});
  auto& duration = registry->AddHistogram("pstrain_serving_request_duration_seconds",
                                          "From a call reaching its handler to its answer (OK or not)", {"method"},
                                          metrics::LatencyBuckets());
  for (int m = 0; m < kNumServingMethods; ++m) {
    requests_[m] = requests.With({kMethodNames[m]});
    duration_[m] = duration.With({kMethodNames[m]});
  }
  refused_ = &registry->AddCounter("pstrain_serving_refused_requests_total",
                                   "Calls answered with an error, by its gRPC code in snake case", {"cause"});
  looked_up_ = registry->AddCounter("pstrain_serving_looked_up_keys_total", "Keys of the Lookups answered").Get();
  auto& loads =
      registry->AddCounter("pstrain_serving_loads_total",
                           "New versions loaded (ok) and polls of the checkpoints that failed (error)", {"result"});
  loads_ = loads.With({"ok"});
  load_errors_ = loads.With({"error"});
  load_duration_ = registry
                       ->AddGauge("pstrain_serving_load_duration_seconds",
                                  "Reading and indexing the newest version loaded: its files, merge and index")
                       .Get();
  step_ = registry->AddGauge("pstrain_serving_step", "The checkpoint cut served (updates applied); -1 before the first")
              .Get();
  step_->Set(-1);
  age_ = registry->AddGauge("pstrain_serving_version_age_seconds", "Seconds since the version served was loaded").Get();
  behind_ = registry
                ->AddGauge("pstrain_serving_steps_behind",
                           "Steps between the newest checkpoint cut every server has written (at the last poll) and "
                           "the cut served")
                .Get();
  rows_ = &registry->AddGauge("pstrain_serving_table_rows", "Rows of each table in the version served", {"table"});
}

void ServingMetrics::Started(ServingMethod method) { requests_[static_cast<int>(method)]->Increment(); }

void ServingMetrics::Answered(ServingMethod method, absl::Duration took, const absl::Status& status) {
  duration_[static_cast<int>(method)]->Observe(absl::ToDoubleSeconds(took));
  if (!status.ok()) refused_->With({absl::AsciiStrToLower(absl::StatusCodeToString(status.code()))})->Increment();
}

void ServingMetrics::Loaded(absl::Duration took) {
  loads_->Increment();
  load_duration_->Set(absl::ToDoubleSeconds(took));
}

void ServingMetrics::SetSource(std::function<std::shared_ptr<const ServedModel>()> current) {
  registry_->AddCollector([this, current = std::move(current)] {
    const std::shared_ptr<const ServedModel> model = current();
    if (model == nullptr) return;
    step_->Set(static_cast<double>(model->step()));
    age_->Set(absl::ToDoubleSeconds(absl::Now() - model->loaded_at()));
    for (int t = 0; t < model->manifest().tables_size(); ++t) {
      rows_->With({model->manifest().tables(t).name()})->Set(static_cast<double>(model->TableRows(t)));
    }
  });
}

}  // namespace pstrain::serving
