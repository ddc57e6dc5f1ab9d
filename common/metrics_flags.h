// --metrics_port, --metrics_host and --metrics_linger_ms, shared by every role binary: where the
// role serves Prometheus metrics (common/metrics_endpoint.h). Also PSTRAIN_METRICS_PORT etc.
//
// Only binaries link this (library `pstrain_metrics_flags`).
#ifndef PSTRAIN_COMMON_METRICS_FLAGS_H_
#define PSTRAIN_COMMON_METRICS_FLAGS_H_

#include <gflags/gflags.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"

DECLARE_int32(metrics_port);
DECLARE_string(metrics_host);
DECLARE_int32(metrics_linger_ms);

namespace pstrain {

// Serves `registry` (with the process_* series added) as the flags say: null when --metrics_port
// is 0 (off); any free port for -1. INVALID_ARGUMENT for a port outside [-1, 65535], UNAVAILABLE
// when it cannot be bound. Logs the URL.
absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetricsFromFlags(metrics::Registry* registry);

// After the role's work: keeps `server` up for --metrics_linger_ms, so a scraper reads the final
// counts, then stops it. Does nothing for a null server.
void LingerAndStopMetrics(HttpServer* server);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_METRICS_FLAGS_H_
