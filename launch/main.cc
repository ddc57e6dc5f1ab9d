// pstrain-launch: runs a training job as a local cluster (1 scheduler, S servers, W workers).
//
//   pstrain-launch                          # the demo job: 2 servers, 2 workers, sync, MLP
//   pstrain-launch --mode=async --workers=4 --epochs=3
//   pstrain-launch --workers=4 --min_workers=2 --max_restarts=3   # survive workers failing
//   pstrain-launch --worker_cmd="python3 train.py"                 # PyTorch scripts as workers
//   pstrain-launch --http_port=8080                                # the dashboard on a fixed port
//
// Takes every job flag of pstrain-scheduler (see common/job_flags.h) plus the launcher's own.
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/binary_init.h"
#include "common/job_flags.h"
#include "transport/security_flags.h"
#include "launch/launcher.h"

DEFINE_string(bin_dir, "",
              "Folder with pstrain-scheduler, pstrain-server and pstrain-worker (default: the launcher's own)");
DEFINE_string(summary_json, "",
              "Where the scheduler writes the run summary (default: a new temporary folder, kept and printed)");
DEFINE_int64(heartbeat_ms, 500, "Heartbeat period of servers and workers, passed to the scheduler");
DEFINE_int64(dead_after_ms, 3000, "A role silent this long is declared dead, passed to the scheduler");
DEFINE_int64(hold_up_after_ms, 0,
             "A live worker that holds the others up this long is evicted, passed to the scheduler (0: "
             "--dead_after_ms)");
DEFINE_int32(progress_interval_s, 5, "Seconds between progress lines when stdout is not a terminal");
DEFINE_string(device, "cpu",
              "Worker device, passed to each worker as --device: cpu, cuda, cuda:N, or a comma list "
              "(cuda:0,cuda:1) that the workers take in turn; all workers share one device otherwise");
DEFINE_bool(unix_sockets, true,
            "Servers also listen on a unix socket in a private folder, which the workers (all on this host) dial: "
            "no TLS encryption there, the job token and session checks unchanged. false: loopback TCP only");
DEFINE_string(tls_dir, "",
              "Folder of the job's per-role credentials: ca.pem, token, and <role>.pem with <role>-key.pem for "
              "scheduler, server, worker and operator (what deploy/k8s/tools/make-tls-secret.sh --dir writes). Each "
              "role gets only its own certificate. Default: throwaway ones made for the job in its temporary folder "
              "(files 0600, folder 0700). --tls_cert/--tls_key/--tls_ca, one certificate for every role, are refused");
DEFINE_bool(tf32, false, "Pass --tf32 to each worker (TF32 GEMMs on CUDA devices)");
DEFINE_string(state_dir, "",
              "The scheduler's --state_dir (default with --max_restarts > 0: a folder in the run's temporary "
              "folder), so that a restarted scheduler goes on with the job");
DEFINE_string(worker_cmd, "",
              "Run each worker as /bin/sh -c 'exec CMD' instead of pstrain-worker, with PSTRAIN_SCHEDULER, "
              "PSTRAIN_WORKER_INDEX and PSTRAIN_DEVICE set and <bin_dir>/../python in front of PYTHONPATH "
              "(empty: pstrain-worker)");
DEFINE_int32(max_restarts, 0,
             "Start a failed child (any role) again up to this many times per launch slot; a worker that fails "
             "with none left is dropped and the job goes on (the scheduler fails it below --min_workers)");

DEFINE_bool(metrics, true,
            "Every role serves Prometheus metrics at /metrics on a port of its own; the URLs are printed at the "
            "start (--nometrics: none)");
DEFINE_int32(http_port, -1,
             "The scheduler's live dashboard and JSON API on this port (-1: a free port, printed at the start; "
             "0: none)");

DEFINE_int32(dashboard_linger_s, 0,
             "Keep the scheduler's dashboard up this many seconds after the job ended, to look at the finished "
             "run (Ctrl-C ends it sooner)");

namespace {

std::string OwnDir() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

}  // namespace

int main(int argc, char** argv) {
  pstrain::InitBinary("Runs a pstrain job as a local cluster of child processes", &argc, &argv);

  if (argc > 1) {
    fprintf(stderr, "pstrain-launch: unexpected argument '%s' (flags are --name=value)\n", argv[1]);
    return 2;
  }
  absl::StatusOr<pstrain::JobSpec> job = pstrain::JobSpecFromFlags();
  if (!job.ok()) {
    fprintf(stderr, "pstrain-launch: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  if (FLAGS_max_restarts < 0) {
    fprintf(stderr, "pstrain-launch: --max_restarts=%d: expected 0 or more\n", FLAGS_max_restarts);
    return 2;
  }
  if (FLAGS_hold_up_after_ms < 0) {
    fprintf(stderr, "pstrain-launch: --hold_up_after_ms=%lld: expected 0 (--dead_after_ms) or more\n",
            static_cast<long long>(FLAGS_hold_up_after_ms));
    return 2;
  }
  if (FLAGS_heartbeat_ms <= 0 || FLAGS_dead_after_ms <= FLAGS_heartbeat_ms || FLAGS_progress_interval_s <= 0) {
    fprintf(stderr,
            "pstrain-launch: --heartbeat_ms=%lld, --dead_after_ms=%lld, --progress_interval_s=%d: expected "
            "0 < heartbeat_ms < dead_after_ms and progress_interval_s > 0\n",
            static_cast<long long>(FLAGS_heartbeat_ms), static_cast<long long>(FLAGS_dead_after_ms),
            FLAGS_progress_interval_s);
    return 2;
  }
  if (FLAGS_http_port < -1 || FLAGS_http_port > 65535) {
    fprintf(stderr, "pstrain-launch: --http_port=%d: expected -1 (a free port), 0 (none) or 1..65535\n",
            FLAGS_http_port);
    return 2;
  }
  if (FLAGS_dashboard_linger_s < 0) {
    fprintf(stderr, "pstrain-launch: --dashboard_linger_s=%d: expected 0 or more\n", FLAGS_dashboard_linger_s);
    return 2;
  }
  if (!FLAGS_worker_cmd.empty() && FLAGS_tf32) {
    fprintf(stderr, "pstrain-launch: --tf32 is passed to pstrain-worker only; a --worker_cmd sets TF32 itself\n");
    return 2;
  }
  // Output goes to pipes that may close (pstrain-launch | head); losing it must not kill us.
  signal(SIGPIPE, SIG_IGN);

  pstrain::launch::LaunchOptions options;
  options.bin_dir = FLAGS_bin_dir.empty() ? OwnDir() : FLAGS_bin_dir;
  options.num_servers = job->num_servers();
  options.num_workers = job->num_workers();
  options.job_flags = pstrain::ExplicitJobFlags();
  options.summary_json = FLAGS_summary_json;
  options.heartbeat_ms = FLAGS_heartbeat_ms;
  options.dead_after_ms = FLAGS_dead_after_ms;
  options.hold_up_after_ms = FLAGS_hold_up_after_ms;
  options.device = FLAGS_device;
  options.tf32 = FLAGS_tf32;
  options.unix_sockets = FLAGS_unix_sockets;
  options.security = pstrain::TransportSecurityOptionsFromFlags();
  options.tls_dir = FLAGS_tls_dir;
  if (absl::Status checked = pstrain::TransportSecurity::Create(options.security).status(); !checked.ok()) {
    fprintf(stderr, "pstrain-launch: %s\n", std::string(checked.message()).c_str());
    return 2;
  }
  options.worker_cmd = FLAGS_worker_cmd;
  if (const char* pythonpath = getenv("PYTHONPATH")) options.pythonpath = pythonpath;
  options.max_restarts = FLAGS_max_restarts;
  options.metrics = FLAGS_metrics;
  options.http_port = FLAGS_http_port;
  options.dashboard_linger = absl::Seconds(FLAGS_dashboard_linger_s);
  options.state_dir = FLAGS_state_dir;
  options.progress_interval = absl::Seconds(FLAGS_progress_interval_s);
  options.live_progress = isatty(STDOUT_FILENO);

  absl::StatusOr<int> code = pstrain::launch::RunLocalCluster(options);
  if (!code.ok()) {
    fprintf(stderr, "pstrain-launch: %s\n", std::string(code.status().message()).c_str());
    return 1;
  }
  return *code;
}
