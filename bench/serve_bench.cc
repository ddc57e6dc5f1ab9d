// pstrain-serve's Lookup latency over loopback gRPC, idle and while new versions are swapped in
// (issue 26's target: a Lookup of 1,000 keys at dim 16 answers within 2 ms at the 99th
// percentile while the serving process follows deltas).
//
//   serve_bench [--rows=1000000] [--dim=16] [--keys=1000] [--calls=10000] [--swap_ms=250]
//
// One table of `rows` rows is served by the real service (serving/serving_service.h) on a
// loopback port, and one client calls Lookup of `keys` keys (nine in ten with a row, one in ten
// without: their initial values) `calls` times in a row:
//   idle       the version stays
//   following  meanwhile a thread makes a new version every `swap_ms` (1% of the rows changed),
//              indexes it and swaps it in, as pstrain-serve does for each new cut, on the same
//              cores
// It prints p50, p99 and max of each, and the ratio following / idle.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "data/criteo_reader.h"
#include "serving/serve_client.h"
#include "serving/served_model.h"
#include "serving/serving_metrics.h"
#include "serving/serving_service.h"

DEFINE_int64(rows, 1000000, "Rows in the table");
DEFINE_int32(dim, 16, "Row width");
DEFINE_int32(keys, 1000, "Keys a Lookup");
DEFINE_int32(calls, 10000, "Lookups a phase");
DEFINE_int32(swap_ms, 250, "A new version every this many milliseconds while following");

namespace pstrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

serving::ModelExport MakeExport(int64_t rows, int dim, uint64_t round) {
  serving::ModelExport e;
  e.manifest.set_step(static_cast<int64_t>(round));
  e.manifest.mutable_job()->set_model("bench");
  ExportedTable* t = e.manifest.add_tables();
  t->set_name("t");
  t->set_dim(dim);
  t->set_init_bound(0.25f);
  t->set_seed(1);
  serving::TableRows table;
  table.keys.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) table.keys[i] = data::Mix64(static_cast<uint64_t>(i));
  std::sort(table.keys.begin(), table.keys.end());
  table.values.resize(static_cast<size_t>(rows) * dim);
  std::mt19937_64 rng(round);
  std::uniform_real_distribution<float> value(-0.1f, 0.1f);
  for (float& v : table.values) v = value(rng);
  e.tables.push_back(std::move(table));
  e.stored_values.emplace_back();
  return e;
}

struct Latencies {
  double p50 = 0, p99 = 0, max = 0;
};

Latencies Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100], us.back()};
}

Latencies Phase(serving::ServeClient* client, const std::vector<std::vector<uint64_t>>& batches, int calls) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(calls));
  for (int c = 0; c < calls; ++c) {
    const auto start = Clock::now();
    absl::StatusOr<serving::LookupResult> got = client->Lookup("t", batches[c % batches.size()]);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    CHECK(got.ok()) << got.status();
  }
  return Summarize(std::move(us));
}

int Main() {
  const serving::ModelExport base = MakeExport(FLAGS_rows, FLAGS_dim, 1);
  serving::ModelSlot slot;
  auto first = serving::ServedModel::Create(base, absl::Now());
  CHECK(first.ok()) << first.status();
  slot.Set(*std::move(first));
  metrics::Registry registry;
  serving::ServingMetrics metrics(&registry);
  serving::ServingService service(&slot, {}, &metrics);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  CHECK(server != nullptr && port > 0);
  auto client = serving::ServeClient::Create("127.0.0.1:" + std::to_string(port), absl::Seconds(30), nullptr);
  CHECK(client.ok());

  // 64 batches of keys: nine in ten with a row, one in ten never seen.
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint64_t>> batches(64);
  for (auto& batch : batches) {
    for (int k = 0; k < FLAGS_keys; ++k) {
      batch.push_back(k % 10 == 9 ? rng() : data::Mix64(rng() % static_cast<uint64_t>(FLAGS_rows)));
    }
  }
  Phase(client->get(), batches, 100);  // warm-up
  const Latencies idle = Phase(client->get(), batches, FLAGS_calls);

  std::atomic<bool> stop{false};
  std::atomic<int> swaps{0};
  std::atomic<double> build_ms{0};
  std::thread follower([&] {
    uint64_t round = 2;
    serving::ModelExport e = base;
    while (!stop.load()) {
      const auto start = Clock::now();
      for (size_t r = 0; r < e.tables[0].keys.size() / 100; ++r) {
        const size_t row = (r * 7919 + round) % e.tables[0].keys.size();
        for (int j = 0; j < FLAGS_dim; ++j) e.tables[0].values[row * FLAGS_dim + j] += 0.001f;
      }
      e.manifest.set_step(static_cast<int64_t>(round++));
      auto next = serving::ServedModel::Create(e, absl::Now());
      CHECK(next.ok());
      slot.Set(*std::move(next));
      build_ms = build_ms + std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      ++swaps;
      for (int i = 0; i < FLAGS_swap_ms / 10 && !stop.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const Latencies following = Phase(client->get(), batches, FLAGS_calls);
  stop = true;
  follower.join();
  server->Shutdown();

  std::printf("serve_bench: Lookup of %d keys (dim %d) from a table of %lld rows, %d calls a phase, loopback gRPC\n",
              FLAGS_keys, FLAGS_dim, static_cast<long long>(FLAGS_rows), FLAGS_calls);
  std::printf("| phase | p50 ms | p99 ms | max ms |\n|---|---|---|---|\n");
  std::printf("| idle | %.3f | %.3f | %.3f |\n", idle.p50 / 1000, idle.p99 / 1000, idle.max / 1000);
  std::printf("| following (%d versions swapped in, %.0f ms each to build) | %.3f | %.3f | %.3f |\n", swaps.load(),
              swaps.load() > 0 ? build_ms.load() / swaps.load() : 0.0, following.p50 / 1000, following.p99 / 1000,
              following.max / 1000);
  std::printf("following / idle: p50 %.2fx, p99 %.2fx\n", following.p50 / idle.p50, following.p99 / idle.p99);
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return pstrain::bench::Main();
}
