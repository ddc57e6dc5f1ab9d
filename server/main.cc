// pstrain-server: one parameter server. Everything about the job comes from the scheduler.
//
//   pstrain-server --scheduler=HOST:PORT [--host=127.0.0.1] [--port=0] [--advertise_host=NAME]
//                  [--metrics_port=0] [--drain_on_stop]
//
// Exit status: 0 when the job finished (or on SIGTERM/SIGINT, or drained by one), 1 when it
// failed, 2 for bad flags.
#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "common/binary_init.h"
#include "transport/health_flags.h"
#include "common/metrics.h"
#include "common/metrics_flags.h"
#include "transport/security_flags.h"
#include "common/stop_signals.h"
#include "server/server_metrics.h"
#include "server/server_runner.h"

DEFINE_string(scheduler, "", "host:port of the scheduler (required)");
DEFINE_string(host, "127.0.0.1", "address this server listens on (and registers with, unless --advertise_host)");
DEFINE_string(unix_socket_dir, "",
              "Also serve on a unix domain socket in a private folder made inside this one (e.g. /tmp), for "
              "workers on the same host; with TLS it uses local credentials: no encryption, the job token and "
              "session checks unchanged (default empty: TCP only)");
DEFINE_string(advertise_host, "",
              "host name or address workers dial this server at, registered with the scheduler with the port "
              "(empty: --host; required when --host listens everywhere, 0.0.0.0 or ::)");
DEFINE_int32(port, 0, "port to listen on; 0 picks a free one");
DEFINE_int64(rpc_timeout_ms, 30000, "deadline of each scheduler rpc, milliseconds");
DEFINE_int64(startup_timeout_ms, 120000, "bound on each startup phase (register, wait for the job), milliseconds");
DEFINE_bool(drain_on_stop, false,
            "SIGTERM/SIGINT while the job runs drains this server instead of stopping it: it asks the scheduler for "
            "the scale-down to one server fewer (it must be the highest rank of a job with checkpoints), serves "
            "until the cut-over drops it, then exits 0; refused, or signalled again, it stops at once. For a "
            "StatefulSet that shrinks");
DEFINE_string(checkpoint_dir, "",
              "this server's checkpoint folder instead of the job's --checkpoint_dir (as a Kubernetes pod's own "
              "volume); a change of the server count then fetches the old servers' checkpoints it lacks from them "
              "(default empty: the job's)");
DEFINE_int64(drain_timeout_ms, 600000, "with --drain_on_stop: stop anyway when not drained within this, milliseconds");

int main(int argc, char** argv) {
  pstrain::InitBinary("pstrain parameter server: pstrain-server --scheduler=HOST:PORT", &argc, &argv);
  // Before any thread starts, so that every thread started later leaves SIGINT and SIGTERM to it.
  pstrain::StopSignals signals;

  if (FLAGS_scheduler.empty()) {
    std::cerr << "pstrain-server: --scheduler=HOST:PORT is required\n";
    return 2;
  }
  if (FLAGS_rpc_timeout_ms <= 0 || FLAGS_startup_timeout_ms <= 0 || FLAGS_drain_timeout_ms <= 0) {
    std::cerr << "pstrain-server: --rpc_timeout_ms, --startup_timeout_ms and --drain_timeout_ms must be > 0\n";
    return 2;
  }
  if (FLAGS_advertise_host.empty() && (FLAGS_host == "0.0.0.0" || FLAGS_host == "::" || FLAGS_host == "[::]")) {
    std::cerr << "pstrain-server: --host=" << FLAGS_host
              << " listens everywhere; say with --advertise_host which address the workers should dial\n";
    return 2;
  }
  pstrain::server::ServerRunner::Options options;
  options.security = pstrain::TransportSecurityFromFlagsOrExit("pstrain-server");
  options.scheduler_address = FLAGS_scheduler;
  options.host = FLAGS_host;
  options.port = FLAGS_port;
  options.advertise_host = FLAGS_advertise_host;
  options.unix_socket_dir = FLAGS_unix_socket_dir;
  options.health_host = FLAGS_health_host;
  options.health_port = FLAGS_health_port;
  options.rpc_timeout = absl::Milliseconds(FLAGS_rpc_timeout_ms);
  options.startup_timeout = absl::Milliseconds(FLAGS_startup_timeout_ms);
  options.drain_on_stop = FLAGS_drain_on_stop;
  options.checkpoint_dir = FLAGS_checkpoint_dir;
  options.drain_timeout = absl::Milliseconds(FLAGS_drain_timeout_ms);
  // The rank comes with registration; the runner adds it to these labels then.
  pstrain::metrics::Registry registry;
  registry.SetConstantLabels({{"role", "server"}});
  pstrain::server::ServerMetrics server_metrics(&registry);
  auto metrics_server = pstrain::ServeMetricsFromFlags(&registry);
  if (!metrics_server.ok()) {
    std::cerr << "pstrain-server: " << metrics_server.status().message() << "\n";
    return absl::IsInvalidArgument(metrics_server.status()) ? 2 : 1;
  }
  options.metrics = &server_metrics;
  options.metrics_port = *metrics_server != nullptr ? (*metrics_server)->port() : 0;
  options.metrics_host = FLAGS_metrics_host;
  auto runner = pstrain::server::ServerRunner::Create(options);
  if (!runner.ok()) {
    std::cerr << "pstrain-server: " << runner.status().message() << "\n";
    return 2;
  }

  absl::Status status;
  {
    pstrain::server::ServerRunner* r = runner->get();
    pstrain::StopSignals::Forwarding forwarding(&signals, [r] { r->Stop(); });
    status = r->Run();
  }
  pstrain::LingerAndStopMetrics(metrics_server->get());
  if (!status.ok()) {
    LOG(ERROR) << "pstrain-server: " << status;
    return 1;
  }
  return 0;
}
