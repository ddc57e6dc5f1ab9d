// pstrain-scheduler: the scheduler of one training job. Exits 0 when the job finished, 1 when it
// failed, 2 when the job description is bad.
#include <gflags/gflags.h>
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include "common/binary_init.h"
#include "transport/health_flags.h"
#include "transport/security_flags.h"
#include "common/job_flags.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "common/metrics_flags.h"
#include "common/stop_signals.h"
#include "transport/health.h"
#include "glog/logging.h"
#include "scheduler/scheduler_runner.h"

DEFINE_string(host, "127.0.0.1", "Address to listen on");
DEFINE_int32(port, 0, "Port to listen on (0: pick a free one)");
DEFINE_string(port_file, "", "Write the chosen port to this file once listening (atomically)");
DEFINE_string(summary_json, "", "Write the run summary (JSON) to this file when the job ends");
DEFINE_int64(heartbeat_ms, 500, "How often roles heartbeat, milliseconds");
DEFINE_int64(dead_after_ms, 3000, "A role silent this long is dead (see the scheduler's churn rules), milliseconds");
DEFINE_int64(hold_up_after_ms, 0,
             "A live worker that holds the others up this long (a SYNC step or barrier waiting for it, an epoch's "
             "end) is evicted even while it heartbeats, milliseconds (0: --dead_after_ms)");
DEFINE_int64(startup_timeout_ms, 300000, "The job fails if not every role registers within this, ms");
DEFINE_string(state_dir, "",
              "Keep the scheduler's state in this folder; started again with a state there, the scheduler goes on "
              "with that job (on the port it had, unless --port is given) and the roles reconnect");
DEFINE_int64(scheduler_reconnect_ms, 30000,
             "With --state_dir: how long servers and workers ride out an outage of the scheduler (waiting for it "
             "to be restarted) before they give up, ms");
DEFINE_int64(stream_poll_ms, 500,
             "--data_stream: how often the stream's folder is looked at for newly ready files, milliseconds");
DEFINE_int32(progressive_window_files, 3,
             "--data_stream: the window of progressive validation (AUC and log loss of records predicted before "
             "they were trained on), in newest files");
DEFINE_int64(server_recovery_timeout_ms, 60000,
             "Sync jobs with checkpoints: the job fails if a dead server is not replaced within this, ms");

DEFINE_int64(linger_ms, 0,
             "After the job ended, keep answering this long, so that roles started late (e.g. restarted by an "
             "orchestrator) learn that the job is over and exit (0 when it FINISHED), ms");

DEFINE_int64(max_model_bytes, 256 << 20,
             "External models: the largest model file a worker may declare or submit, bytes (about 4 per "
             "parameter); larger requests are refused. A built-in model's limit follows from its size");

DEFINE_string(advertise_host, "",
              "The host scrapers reach this scheduler at, listed in /api/targets with its metrics port when "
              "--metrics_host is a wildcard (default: --host)");

DEFINE_int32(http_port, 0,
             "Serve the live dashboard, its JSON API (/api/status, /api/timeline, /api/targets) and /metrics "
             "on this port (0: off, -1: any free port)");
DEFINE_string(http_host, "", "With --http_port: the address the dashboard binds (empty: --host)");
DEFINE_string(http_port_file, "",
              "With --http_port: write the dashboard's port to this file once listening (atomically)");

int main(int argc, char** argv) {
  pstrain::InitBinary("pstrain-scheduler --servers=2 --workers=2 [job flags]", &argc, &argv);
  // Before any thread starts, so that every thread started later leaves SIGINT and SIGTERM to it.
  pstrain::StopSignals signals;

  absl::StatusOr<pstrain::JobSpec> job = pstrain::JobSpecFromFlags();
  if (!job.ok()) {
    std::cerr << "pstrain-scheduler: bad job: " << job.status().message() << std::endl;
    return 2;
  }

  pstrain::scheduler::SchedulerRunner::Options options;
  options.security = pstrain::TransportSecurityFromFlagsOrExit("pstrain-scheduler");
  options.host = FLAGS_host;
  options.port = FLAGS_port;
  options.port_file = FLAGS_port_file;
  options.health_host = FLAGS_health_host;
  options.health_port = FLAGS_health_port;
  options.summary_json = FLAGS_summary_json;
  options.heartbeat_interval = absl::Milliseconds(FLAGS_heartbeat_ms);
  options.dead_after = absl::Milliseconds(FLAGS_dead_after_ms);
  options.hold_up_after = absl::Milliseconds(FLAGS_hold_up_after_ms);
  options.startup_timeout = absl::Milliseconds(FLAGS_startup_timeout_ms);
  options.server_recovery_timeout = absl::Milliseconds(FLAGS_server_recovery_timeout_ms);
  options.stream_poll = absl::Milliseconds(FLAGS_stream_poll_ms);
  options.progressive_window_files = FLAGS_progressive_window_files;
  options.state_dir = FLAGS_state_dir;
  options.reconnect = absl::Milliseconds(FLAGS_scheduler_reconnect_ms);
  options.linger = absl::Milliseconds(FLAGS_linger_ms);
  options.max_model_bytes = FLAGS_max_model_bytes;
  options.http_host = FLAGS_http_host.empty() ? FLAGS_host : FLAGS_http_host;
  options.http_port = FLAGS_http_port;
  options.http_port_file = FLAGS_http_port_file;

  // The scheduler's metrics, on --metrics_port and at the dashboard's /metrics.
  pstrain::metrics::Registry registry;
  registry.SetConstantLabels({{"role", "scheduler"}});
  absl::StatusOr<std::unique_ptr<pstrain::HttpServer>> metrics_server = pstrain::ServeMetricsFromFlags(&registry);
  if (!metrics_server.ok()) {
    std::cerr << "pstrain-scheduler: " << metrics_server.status().message() << std::endl;
    return 2;
  }
  if (*metrics_server != nullptr) {
    options.metrics_address =
        pstrain::MetricsAddress(FLAGS_metrics_host, FLAGS_advertise_host.empty() ? FLAGS_host : FLAGS_advertise_host,
                                (*metrics_server)->port());
  } else if (FLAGS_http_port != 0) {
    pstrain::AddProcessMetrics(&registry);  // The dashboard's /metrics is then the only one.
  }
  options.metrics = &registry;
  auto runner = pstrain::scheduler::SchedulerRunner::Create(*job, options);
  if (!runner.ok()) {
    std::cerr << "pstrain-scheduler: " << runner.status().message() << std::endl;
    return 2;
  }

  pstrain::scheduler::SchedulerRunner* r = runner->get();
  absl::Status status;
  {
    pstrain::StopSignals::Forwarding forwarding(&signals, [r] { r->Stop(); });
    status = r->Run();
  }
  pstrain::LingerAndStopMetrics(metrics_server->get());
  if (!status.ok()) {
    LOG(ERROR) << "pstrain-scheduler: " << status;
    return 1;
  }
  return 0;
}
