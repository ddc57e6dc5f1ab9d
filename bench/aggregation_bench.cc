// The server's SYNC aggregation path against memcpy of the same bytes, in one run, for gradients
// of 1M and 16M floats:
//
//   Memcpy            copy one worker's gradient (4N bytes)             the baseline
//   WeightedSum       sum = 0; sum += w_r g_r for 2 workers (float_ops), as the store does it
//   SyncStep/sgd      a whole SYNC step through ParameterStore: 2 workers push directly (no gRPC);
//   SyncStep/adam     validation, copy-in, weighted sum and one optimizer update
//   SyncStepAdamNormGuard  SyncStep/adam with --max_grad_norm_per_sample=1000 (the suggested
//                     value, docs/guides/security.md): what the guard's extra pass over a push costs
//
// bytes_per_second counts gradient bytes taken in: 4N per call for Memcpy, 2 x 4N for the rest
// (two workers' gradients), so the ratio to Memcpy reads as "gradient bytes per second the step
// consumes, relative to copying them". `floats` = N. Three repetitions each; bench/run.sh makes
// the ratios from the medians.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/malloc_tuning.h"
#include "bench/bench_store.h"
#include "server/float_ops.h"
#include "server/parameter_store.h"

namespace pstrain::bench {
namespace {

constexpr int64_t kSizes[] = {int64_t{1} << 20, int64_t{16} << 20};
constexpr int kWorkers = 2;

void SetCounters(benchmark::State& state, int64_t floats, int64_t bytes_per_call) {
  state.SetBytesProcessed(state.iterations() * bytes_per_call);
  state.counters["floats"] = static_cast<double>(floats);
}

void BM_Memcpy(benchmark::State& state, int64_t n) {
  std::vector<float> grad(static_cast<size_t>(n), 1e-3f);
  std::vector<float> dst(static_cast<size_t>(n), 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), grad.data(), static_cast<size_t>(n) * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, n, 4 * n);
}

void BM_WeightedSum(benchmark::State& state, int64_t n) {
  std::vector<std::vector<float>> grads(kWorkers, std::vector<float>(static_cast<size_t>(n), 1e-3f));
  std::vector<float> sum(static_cast<size_t>(n), 0.0f);
  // Equal sample counts, as in a full global batch.
  const float weight = 1.0f / kWorkers;
  for (auto _ : state) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int r = 0; r < kWorkers; ++r) server::AddScaled(weight, grads[r].data(), n, sum.data());
    benchmark::DoNotOptimize(sum.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, n, kWorkers * 4 * n);
}

// Pushes `req` and returns its status. Never parks: a push is answered before Push returns.
absl::Status PushNow(server::ParameterStore* store, const PushRequest& req) {
  absl::Status result = absl::UnknownError("push callback not run");
  PushResponse resp;
  store->Push(req, &resp, [&result](absl::Status s) { result = std::move(s); });
  return result;
}

void BM_SyncStep(benchmark::State& state, int64_t n, OptimizerSpec::Type optimizer, double max_grad_norm = 0) {
  const ShardMap map = OneTensorShardMap(n);
  absl::StatusOr<std::unique_ptr<server::ParameterStore>> store =
      NewBenchStore(map, SYNC, optimizer, kWorkers, max_grad_norm);
  if (!store.ok()) {
    state.SkipWithError(store.status().ToString().c_str());
    return;
  }
  std::vector<PushRequest> pushes;
  for (int r = 0; r < kWorkers; ++r) pushes.push_back(GradientPush(map, r, 1e-6f * (r + 1)));
  int64_t step = 0;
  uint64_t request_id = 0;
  absl::Status status;
  for (auto _ : state) {
    for (PushRequest& push : pushes) {
      push.set_step(step);
      push.set_request_id(++request_id);
      status = PushNow(store->get(), push);
      if (!status.ok()) break;
    }
    if (!status.ok()) break;
    ++step;  // the last push completed the step
  }
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  if ((*store)->step() != step) {
    state.SkipWithError(absl::StrCat("store is at step ", (*store)->step(), ", expected ", step).c_str());
    return;
  }
  SetCounters(state, n, kWorkers * 4 * n);
}

std::string SizeName(int64_t n) { return absl::StrCat(n >> 20, "M"); }

void RegisterAll() {
  for (int64_t n : kSizes) {
    const std::string size = SizeName(n);
    benchmark::internal::Benchmark* benchmarks[] = {
        benchmark::RegisterBenchmark(("Memcpy/" + size).c_str(), BM_Memcpy, n),
        benchmark::RegisterBenchmark(("WeightedSum/" + size).c_str(), BM_WeightedSum, n),
        benchmark::RegisterBenchmark(("SyncStepSgd/" + size).c_str(), BM_SyncStep, n, OptimizerSpec::SGD, 0.0),
        benchmark::RegisterBenchmark(("SyncStepAdam/" + size).c_str(), BM_SyncStep, n, OptimizerSpec::ADAM, 0.0),
        benchmark::RegisterBenchmark(("SyncStepAdamNormGuard/" + size).c_str(), BM_SyncStep, n, OptimizerSpec::ADAM,
                                     1000.0),
    };
    for (benchmark::internal::Benchmark* b : benchmarks) {
      b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2)->Repetitions(3)->ReportAggregatesOnly(true);
    }
  }
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  pstrain::KeepFreedMemoryForReuse();  // As the server binary does.
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;  // every store logs its creation at INFO
  pstrain::bench::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
