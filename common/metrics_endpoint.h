// Serving a process's metrics: /metrics in Prometheus' text format over HTTP, plus the standard
// process_* series (CPU seconds, resident memory, start time, open files) every exporter has.
#ifndef PSTRAIN_COMMON_METRICS_ENDPOINT_H_
#define PSTRAIN_COMMON_METRICS_ENDPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"

namespace pstrain {

// The content type of Prometheus' text exposition format.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// The route that answers GET /metrics with `registry` rendered. The registry must outlive the
// server the route is given to.
HttpRoute MetricsRoute(const metrics::Registry* registry);

// Serves `registry` at /metrics on host:port (port 0: any free port), with `more` routes beside it
// and a short index at "/". UNAVAILABLE when the port cannot be bound.
absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetrics(const metrics::Registry* registry, const std::string& host,
                                                         int port, std::vector<HttpRoute> more = {});

// The "host:port" a scraper dials for a metrics listener bound to `bind_host`:`port`: `bind_host`
// itself, unless it listens everywhere (empty, 0.0.0.0, ::, [::]), then `advertise_host`, or
// 127.0.0.1 when that is empty or a wildcard too. What roles register with the scheduler.
std::string MetricsAddress(const std::string& bind_host, const std::string& advertise_host, int port);

// Adds process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds and process_start_time_seconds, read from /proc at each scrape.
void AddProcessMetrics(metrics::Registry* registry);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_METRICS_ENDPOINT_H_
