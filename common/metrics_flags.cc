#include "common/metrics_flags.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics_endpoint.h"
#include "glog/logging.h"

DEFINE_int32(metrics_port, 0,
             "Serve Prometheus metrics over HTTP at /metrics on this port (0: off; -1: any free port, reported "
             "to the scheduler and logged)");
DEFINE_string(metrics_host, "0.0.0.0", "With --metrics_port: the address the metrics listener binds");
DEFINE_int32(metrics_linger_ms, 0,
             "With --metrics_port: keep serving metrics this long after the role's work ends, so a scraper "
             "reads the final counts");

namespace pstrain {

absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetricsFromFlags(metrics::Registry* registry) {
  if (FLAGS_metrics_port == 0) return std::unique_ptr<HttpServer>();
  if (FLAGS_metrics_port < -1 || FLAGS_metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port=", FLAGS_metrics_port, ": expected 0 (off), -1 (any free port) or 1..65535"));
  }
  if (FLAGS_metrics_linger_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_linger_ms=", FLAGS_metrics_linger_ms, ": expected a duration >= 0"));
  }
  AddProcessMetrics(registry);
  auto server = ServeMetrics(registry, FLAGS_metrics_host, FLAGS_metrics_port == -1 ? 0 : FLAGS_metrics_port);
  if (!server.ok()) return server.status();
  LOG(INFO) << "metrics at http://" << (*server)->address() << "/metrics";
  return server;
}

void LingerAndStopMetrics(HttpServer* server) {
  if (server == nullptr) return;
  if (FLAGS_metrics_linger_ms > 0) absl::SleepFor(absl::Milliseconds(FLAGS_metrics_linger_ms));
  server->Stop();
}

}  // namespace pstrain
