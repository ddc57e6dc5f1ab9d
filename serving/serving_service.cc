#include "serving/serving_service.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/grpc_status.h"
#include "common/status_macros.h"

namespace pstrain::serving {
namespace {

// Runs `body`, metering it as `method`.
template <typename Body>
grpc::Status Metered(ServingMetrics* metrics, ServingMethod method, Body body) {
  const absl::Time start = absl::Now();
  metrics->Started(method);
  const absl::Status status = body();
  metrics->Answered(method, absl::Now() - start, status);
  return ToGrpcStatus(status);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ServedModel>> ServingService::Current() const {
  std::shared_ptr<const ServedModel> model = slot_->Get();
  if (model == nullptr) {
    return absl::UnavailableError("no model loaded yet: the serving process is waiting for the job's first checkpoint");
  }
  return model;
}

grpc::Status ServingService::Lookup(grpc::ServerContext*, const LookupRequest* request, LookupResponse* response) {
  return Metered(metrics_, ServingMethod::kLookup, [&]() -> absl::Status {
    const int64_t n = request->keys_size();
    if (n == 0 || n > limits_.max_lookup_keys) {
      return absl::InvalidArgumentError(absl::StrCat("Lookup of ", n, " keys in table '", request->table(),
                                                     "', expected 1 to ", limits_.max_lookup_keys,
                                                     " (--max_lookup_keys)"));
    }
    ASSIGN_OR_RETURN(const std::shared_ptr<const ServedModel> model, Current());
    ASSIGN_OR_RETURN(const int32_t dim, model->TableDim(request->table()));
    std::string* bytes = response->mutable_values();
    bytes->resize(static_cast<size_t>(n) * dim * sizeof(float));
    std::vector<bool> found;
    RETURN_IF_ERROR(model->Lookup(request->table(), request->keys(),
                                  absl::MakeSpan(reinterpret_cast<float*>(bytes->data()), static_cast<size_t>(n) * dim),
                                  &found));
    response->set_step(model->step());
    response->set_dim(dim);
    response->mutable_found()->Reserve(static_cast<int>(n));
    for (bool f : found) response->add_found(f);
    metrics_->LookedUp(n);
    return absl::OkStatus();
  });
}

grpc::Status ServingService::Predict(grpc::ServerContext*, const PredictRequest* request, PredictResponse* response) {
  return Metered(metrics_, ServingMethod::kPredict, [&]() -> absl::Status {
    const int64_t n = request->records_size();
    if (n == 0 || n > limits_.max_predict_records) {
      return absl::InvalidArgumentError(absl::StrCat("Predict of ", n, " records, expected 1 to ",
                                                     limits_.max_predict_records, " (--max_predict_records)"));
    }
    ASSIGN_OR_RETURN(const std::shared_ptr<const ServedModel> model, Current());
    const std::vector<std::string> records(request->records().begin(), request->records().end());
    ASSIGN_OR_RETURN(const std::vector<float> probabilities, model->Predict(records));
    response->set_step(model->step());
    response->mutable_probabilities()->Add(probabilities.begin(), probabilities.end());
    return absl::OkStatus();
  });
}

grpc::Status ServingService::GetModelInfo(grpc::ServerContext*, const ModelInfoRequest*, ModelInfo* response) {
  return Metered(metrics_, ServingMethod::kGetModelInfo, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const std::shared_ptr<const ServedModel> model, Current());
    response->set_step(model->step());
    response->set_newest_step(std::max(slot_->newest_seen(), model->step()));
    response->set_model(model->manifest().job().model());
    response->set_dense_values(model->dense_values());
    response->set_loaded_at(absl::ToDoubleSeconds(model->loaded_at() - absl::UnixEpoch()));
    for (int t = 0; t < model->manifest().tables_size(); ++t) {
      ModelInfo::Table* table = response->add_tables();
      table->set_name(model->manifest().tables(t).name());
      table->set_dim(model->manifest().tables(t).dim());
      table->set_rows(model->TableRows(t));
    }
    return absl::OkStatus();
  });
}

}  // namespace pstrain::serving
