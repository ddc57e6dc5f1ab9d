// How long a Prometheus scrape of a parameter server takes: a store holding one shard of a
// realistic model (--floats, default 25M floats = 100 MB, a ResNet-50's worth), its ServerMetrics
// with every per-call series populated, served on a free port; then --scrapes GETs of /metrics
// over one keep-alive connection, as Prometheus makes them. Prints one table row:
//
//   floats     scrapes  body_bytes  mean_ms  p50_ms  p99_ms  max_ms  render_ms
//
// (render_ms: Registry::Render alone, the collector included, without HTTP.)
//
// A scrape reads the stores (step, parked calls, table stats) under their lock once and renders
// the registry; nothing in it grows with the model, which the --floats flag lets one check.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include <httplib.h>

#include "bench/bench_store.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "server/server_metrics.h"

DEFINE_int64(floats, 25'000'000, "floats of the shard the server holds");
DEFINE_int32(scrapes, 200, "GETs of /metrics to time");

namespace pstrain::bench {
namespace {

int Main() {
  const ShardMap map = OneTensorShardMap(FLAGS_floats);
  absl::StatusOr<std::unique_ptr<server::ParameterStore>> store = NewBenchStore(map, SYNC, OptimizerSpec::SGD, 1);
  CHECK(store.ok()) << store.status();
  metrics::Registry registry;
  registry.SetConstantLabels({{"role", "server"}, {"rank", "0"}});
  server::ServerMetrics server_metrics(&registry);
  server_metrics.SetShards(0, 1);
  server_metrics.Watch(store->get(), nullptr, [] { return int64_t{0}; });
  const server::StoreMetrics shard = server_metrics.ForShard(0);
  // Every per-call series in use, with observations spread over the buckets.
  for (int i = 0; i < 1000; ++i) {
    for (int m = 0; m < server::kNumRpcMethods; ++m) {
      server::ServerMetrics::Call call(&server_metrics, static_cast<server::RpcMethod>(m), 1 << 20);
      call.Route(i % 2 == 0 ? server::ServerMetrics::kOwn : server::ServerMetrics::kReplica);
      call.Answered(1 << 20);
    }
    shard.step_wait->Observe(0.001 * (i % 50));
  }
  shard.checkpoint_duration->Observe(1.5);
  shard.checkpoints_written->Increment();
  AddProcessMetrics(&registry);
  absl::StatusOr<std::unique_ptr<HttpServer>> http = ServeMetrics(&registry, "127.0.0.1", 0);
  CHECK(http.ok()) << http.status();

  httplib::Client client("127.0.0.1", (*http)->port());
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  const int n = std::max(1, FLAGS_scrapes);
  std::vector<double> ms;
  size_t body = 0;
  for (int i = 0; i < n + 5; ++i) {  // the first 5 warm up
    const auto start = std::chrono::steady_clock::now();
    httplib::Result got = client.Get("/metrics");
    const auto end = std::chrono::steady_clock::now();
    CHECK(got && got->status == 200) << "scrape failed";
    body = got->body.size();
    if (i >= 5) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  // The render alone, without HTTP, to tell the server's work from the transport's.
  const auto render_start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) CHECK(!registry.Render().empty());
  const double render_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - render_start).count() / n;
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double v : ms) sum += v;
  auto at = [&](double q) { return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))]; };
  std::printf("%-10s %8s %11s %8s %7s %7s %7s %10s\n", "floats", "scrapes", "body_bytes", "mean_ms", "p50_ms", "p99_ms",
              "max_ms", "render_ms");
  std::printf("%-10lld %8d %11zu %8.3f %7.3f %7.3f %7.3f %10.3f\n", static_cast<long long>(FLAGS_floats), n, body,
              sum / n, at(0.5), at(0.99), ms.back(), render_ms);
  server_metrics.Unwatch();
  (*http)->Stop();
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return pstrain::bench::Main();
}
