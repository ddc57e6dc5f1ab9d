// The Serving gRPC service (proto/serving.proto) over the version a serving process holds, and
// the slot that holds it.
//
// ModelSlot holds one ServedModel at a time; the follower (serving/serve_runner.h) swaps a whole
// new version in, and each call takes the version current when it starts and answers from it
// alone, saying its step. A version stays alive while a call still uses it.
//
// Limits: a Lookup of more than `max_lookup_keys` keys and a Predict of more than
// `max_predict_records` records are refused (INVALID_ARGUMENT naming the limit) before any work;
// the listener's own message limit (serve_runner.h) bounds the bytes before that.
//
// Thread safety: every method may be called from any thread.
#ifndef PSTRAIN_SERVING_SERVING_SERVICE_H_
#define PSTRAIN_SERVING_SERVING_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/serving.grpc.pb.h"
#include "serving/served_model.h"
#include "serving/serving_metrics.h"

namespace pstrain::serving {

class ModelSlot {
 public:
  // The version served now; null before the first.
  std::shared_ptr<const ServedModel> Get() const {
    absl::MutexLock lock(&mu_);
    return model_;
  }
  void Set(std::shared_ptr<const ServedModel> model) {
    absl::MutexLock lock(&mu_);
    model_ = std::move(model);
  }
  // The newest cut the source had at its last look (-1: unknown): how far behind the version is.
  int64_t newest_seen() const { return newest_seen_.load(std::memory_order_relaxed); }
  void SetNewestSeen(int64_t step) { newest_seen_.store(step, std::memory_order_relaxed); }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const ServedModel> model_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> newest_seen_{-1};
};

struct ServingLimits {
  int64_t max_lookup_keys = 100000;
  int64_t max_predict_records = 10000;
};

class ServingService final : public Serving::Service {
 public:
  // `slot` and `metrics` are borrowed and must outlive the service.
  ServingService(const ModelSlot* slot, ServingLimits limits, ServingMetrics* metrics)
      : slot_(slot), limits_(limits), metrics_(metrics) {}

  grpc::Status Lookup(grpc::ServerContext* context, const LookupRequest* request, LookupResponse* response) override;
  grpc::Status Predict(grpc::ServerContext* context, const PredictRequest* request, PredictResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const ModelInfoRequest* request,
                            ModelInfo* response) override;

 private:
  // The version to answer from, or UNAVAILABLE before the first.
  absl::StatusOr<std::shared_ptr<const ServedModel>> Current() const;

  const ModelSlot* slot_;
  const ServingLimits limits_;
  ServingMetrics* metrics_;
};

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_SERVING_SERVICE_H_
