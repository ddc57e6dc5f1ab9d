// pstrain-worker: computes gradients on its share of the data and trains with the parameter servers.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/binary_init.h"
#include "transport/health.h"
#include "transport/health_flags.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "common/metrics_flags.h"
#include "transport/security_flags.h"
#include "common/stop_signals.h"
#include "model/cpu_backend.h"
#include "worker/worker_runner.h"

DEFINE_string(scheduler, "", "Scheduler address, host:port (required)");
DEFINE_string(device, "cpu",
              "Where to compute: cpu, cuda (= cuda:0) or cuda:N. Several workers may share one GPU "
              "(each gets its own backend and stream)");
DEFINE_bool(tf32, false, "With --device=cuda: let GEMMs use TF32 tensor cores (faster, ~1e-3 relative error)");
DEFINE_int32(blas_threads, 1, "OpenBLAS threads for the CPU backend (1 suits several roles per machine)");
DEFINE_int64(rpc_timeout_ms, 60000, "Deadline of each call to a parameter server");
DEFINE_int32(tcp_connections, 2,
             "TCP connections to each parameter server not on this host; calls take them in turn, so the "
             "parts of an overlapped step travel side by side");
DEFINE_string(advertise_host, "",
              "With --metrics_port and a --metrics_host that listens everywhere: the host the scheduler lists "
              "this worker's metrics at (default: 127.0.0.1)");
DEFINE_int64(startup_timeout_ms, 120000, "How long to wait for the scheduler and the other roles");

int main(int argc, char** argv) {
  pstrain::InitBinary("pstrain-worker --scheduler=HOST:PORT [--device=cpu|cuda|cuda:N] [--tf32]", &argc, &argv);
  // Before any thread starts, so that every thread started later leaves SIGINT and SIGTERM to it.
  pstrain::StopSignals signals;
  if (FLAGS_scheduler.empty()) {
    std::cerr << "pstrain-worker: --scheduler=HOST:PORT is required\n";
    return 2;
  }
  if (FLAGS_blas_threads < 1) {
    std::cerr << "pstrain-worker: --blas_threads: got " << FLAGS_blas_threads << ", expected >= 1\n";
    return 2;
  }
  pstrain::model::SetCpuThreads(FLAGS_blas_threads);
  if (FLAGS_rpc_timeout_ms <= 0 || FLAGS_startup_timeout_ms <= 0) {
    std::cerr << "pstrain-worker: --rpc_timeout_ms and --startup_timeout_ms must be > 0\n";
    return 2;
  }
  if (FLAGS_tcp_connections < 1) {
    std::cerr << "pstrain-worker: --tcp_connections: got " << FLAGS_tcp_connections << ", expected >= 1\n";
    return 2;
  }
  if (FLAGS_health_port < 0 || FLAGS_health_port > 65535) {
    std::cerr << "pstrain-worker: --health_port: got " << FLAGS_health_port << ", expected 0..65535\n";
    return 2;
  }
  if (FLAGS_health_port > 0 && FLAGS_health_host.empty()) {
    std::cerr << "pstrain-worker: --health_host is empty, expected an address to listen on\n";
    return 2;
  }
  // Ignore SIGPIPE from closed log pipes.
  std::signal(SIGPIPE, SIG_IGN);

  // Served before registering, so the scheduler learns where (the port may be any free one).
  pstrain::metrics::Registry registry;
  absl::StatusOr<std::unique_ptr<pstrain::HttpServer>> metrics = pstrain::ServeMetricsFromFlags(&registry);
  if (!metrics.ok()) {
    std::cerr << "pstrain-worker: " << metrics.status().message() << "\n";
    return 2;
  }

  pstrain::worker::WorkerOptions options;
  options.member.metrics = &registry;
  if (*metrics != nullptr) {
    options.member.metrics_address =
        pstrain::MetricsAddress(FLAGS_metrics_host, FLAGS_advertise_host, (*metrics)->port());
  }
  options.member.security = pstrain::TransportSecurityFromFlagsOrExit("pstrain-worker");
  options.member.scheduler_address = FLAGS_scheduler;
  options.device = FLAGS_device;
  options.allow_tf32 = FLAGS_tf32;
  options.member.rpc_timeout = absl::Milliseconds(FLAGS_rpc_timeout_ms);
  options.member.tcp_connections = FLAGS_tcp_connections;
  options.member.startup_timeout = absl::Milliseconds(FLAGS_startup_timeout_ms);
  options.member.health_host = FLAGS_health_host;
  options.member.health_port = FLAGS_health_port;
  // SIGTERM/SIGINT: finish the current step, leave the job, exit 0.
  std::atomic<bool> leave{false};
  options.member.leave = &leave;
  absl::Status status;
  {
    pstrain::StopSignals::Forwarding forwarding(&signals, [&leave] { leave = true; });
    status = pstrain::worker::RunWorker(options);
  }
  pstrain::LingerAndStopMetrics(metrics->get());
  if (!status.ok()) {
    LOG(ERROR) << "worker failed: " << status;
    return 1;
  }
  LOG(INFO) << "worker done";
  return 0;
}
