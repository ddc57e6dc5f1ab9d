// Runs a whole job as a local cluster of child processes: 1 scheduler, S servers, W workers on
// loopback, with prefixed child output, a progress display and a clean stop.
//
//   mkdtemp -> scheduler --port=0 --port_file=F ... -> wait for F (<= port_timeout)
//           -> S x server, W x worker --scheduler=HOST:PORT
//           -> loop: child output, GetJobStatus every status_interval, signals
//           -> every child ended -> final result -> remove the temp dir
//
// A child that exits non-zero or dies by a signal while the scheduler runs:
//
//   restarts left (max_restarts per launch slot)  -> started again with the same command line
//                                                    (the scheduler on the port it had, so the
//                                                    others still find it, and with the same
//                                                    --state_dir, so it goes on with the job)
//   a worker, none left                           -> the job goes on without it; the scheduler
//                                                    decides whether that is too few workers
//   the scheduler or a server, none left          -> stop the rest: SIGTERM, then SIGKILL after
//                                                    stop_grace
//
// Once the scheduler has exited 0, or its GetJobStatus said the job finished or failed, nothing is
// restarted and any child failing stops the rest. SIGINT, SIGTERM or SIGHUP to the launcher stops
// everything (a second one kills at once).
#ifndef PSTRAIN_LAUNCH_LAUNCHER_H_
#define PSTRAIN_LAUNCH_LAUNCHER_H_

#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/transport_security.h"
#include "launch/status_source.h"

namespace pstrain {
namespace launch {

struct LaunchOptions {
  // Folder holding pstrain-scheduler, pstrain-server and pstrain-worker (not needed with a
  // worker_cmd).
  std::string bin_dir;
  int num_servers = 2;
  int num_workers = 2;
  // Job flags ("--name=value") handed to the scheduler unchanged.
  std::vector<std::string> job_flags;
  // Where the scheduler writes its summary. Empty: <temp dir>/summary.json, which is then kept
  // (with its folder) after the run and its path printed.
  std::string summary_json;
  int64_t heartbeat_ms = 500;
  int64_t dead_after_ms = 3000;
  // The scheduler's --hold_up_after_ms, passed when positive (0: its default, dead_after_ms).
  int64_t hold_up_after_ms = 0;
  std::string host = "127.0.0.1";
  // Worker device, passed as --device. A comma list ("cuda:0,cuda:1") is dealt out round-robin:
  // worker i gets entry i % size.
  std::string device = "cpu";
  // Pass --tf32 to the workers.
  bool tf32 = false;
  // How the job's channels are secured (transport/transport_security.h), handed to every child as
  // flags (a worker_cmd: as PSTRAIN_TLS_CERT etc.). Each role gets its own certificate and key
  // (transport/peer_role.h: a worker's cannot register a server), from `tls_dir` when set, else from
  // throwaway credentials the launcher makes for the job in its temporary folder
  // (transport/job_credentials.h: a CA, one certificate per role and a token, files 0600 in a 0700
  // folder), so that even a local job is closed to other users of the machine. `security` gives
  // --insecure, the server name and the reload interval; a certificate file in it (one
  // certificate for every role) is refused: INVALID_ARGUMENT saying to give `tls_dir`.
  TransportSecurityOptions security;
  // A folder of the job's per-role credentials in transport/job_credentials.h's layout (ca.pem,
  // token, scheduler.pem, scheduler-key.pem, server.pem, ...). Empty: throwaway ones.
  std::string tls_dir;
  // Servers also listen on a unix socket in a private folder inside the launcher's temporary
  // folder, and the workers (all on this host) dial it: with TLS, gRPC's local credentials
  // instead of encryption, the job token and session checks unchanged (transport/transport_security.h).
  // False: loopback TCP only.
  bool unix_sockets = true;
  // When set, each worker slot runs `/bin/sh -c 'exec <worker_cmd>'` (a PyTorch script, say)
  // instead of pstrain-worker. worker_cmd is one command line in shell syntax (a program and its
  // arguments; quotes, variables and redirections work, but after `;` or `&&` nothing would run:
  // put several commands in a script). It gets these environment variables:
  //   PSTRAIN_SCHEDULER     the scheduler's "host:port"
  //   PSTRAIN_WORKER_INDEX  the launch slot, 0 .. num_workers - 1 (not the rank the scheduler
  //                         assigns)
  //   PSTRAIN_DEVICE        the slot's entry of `device`, as pstrain-worker's --device would be
  //   PYTHONPATH            <bin_dir>/../python (made absolute) in front of `pythonpath`, when
  //                         that folder exists, so `import pstrain` finds the build's package
  // Everything else is as for pstrain-worker: the "[worker i]" prefix, restarts, the exit-code
  // rules below. The exec makes the stop signals reach the command itself, not a shell.
  // `tf32` does not apply. Empty: pstrain-worker.
  std::string worker_cmd;
  // The PYTHONPATH a worker_cmd extends (main.cc passes the launcher's own); empty: none.
  std::string pythonpath;
  // How often each launch slot (the scheduler, server i, worker i) is started again after its
  // child failed. 0: never.
  int max_restarts = 0;
  // The scheduler's --state_dir, so that a restarted scheduler goes on with the job and the other
  // roles reconnect to it. Empty: <temp dir>/scheduler-state when max_restarts > 0 (removed with
  // the temp dir), none otherwise.
  std::string state_dir;

  // Observability (issue 16). With `metrics`, every role serves Prometheus metrics at
  // http://host:PORT/metrics on a port the launcher picks (launch/free_port.h), passed as
  // --metrics_port (a worker_cmd: PSTRAIN_METRICS_PORT). `http_port` is the scheduler's dashboard
  // and JSON API: -1 picks a free port, 0 turns it off. The URLs are printed once the scheduler
  // listens, one per line:
  //   [launch] dashboard http://127.0.0.1:PORT/
  //   [launch] metrics scheduler http://127.0.0.1:PORT/metrics
  //   [launch] metrics server 0 http://127.0.0.1:PORT/metrics   (and so on for each role)
  bool metrics = true;
  int http_port = -1;
  // How long the scheduler keeps serving (the dashboard, its final numbers) after the job ended,
  // passed as its --linger_ms; the launcher waits for it. Zero: it exits at once.
  absl::Duration dashboard_linger = absl::ZeroDuration();

  absl::Duration status_interval = absl::Milliseconds(500);
  absl::Duration status_deadline = absl::Milliseconds(300);
  // Without live progress, a plain progress line this often.
  absl::Duration progress_interval = absl::Seconds(5);
  // How long the scheduler may take to write its port file.
  absl::Duration port_timeout = absl::Seconds(30);
  // Between SIGTERM and SIGKILL when stopping children.
  absl::Duration stop_grace = absl::Seconds(5);
  // How long servers and workers may keep running after the scheduler exited 0.
  absl::Duration finish_timeout = absl::Seconds(30);

  // Borrowed output fds; live_progress draws an updating line on out_fd (set it when out_fd is
  // a terminal).
  int out_fd = STDOUT_FILENO;
  int err_fd = STDERR_FILENO;
  bool live_progress = false;

  // Makes the progress source for the scheduler at "host:port"; empty: its GetJobStatus rpc.
  std::function<std::unique_ptr<JobStatusSource>(const std::string& address)> status_source;
};

// Runs the cluster until every child has ended; blocks. Returns the launcher's exit code:
//   0        the scheduler and every server exited 0 (the final result was printed); workers
//            that failed while the scheduler ran and were not restarted do not count (each was
//            printed as one the job continued without);
//   1        the scheduler exited non-zero; a server failed with no restarts left; a child failed
//            once the job was over (see above), could not be restarted, or outlived the scheduler
//            by finish_timeout (which one and how was printed);
//   128 + N  the launcher got signal N (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
// A non-OK status means the cluster could not be brought up by the launcher's own fault or the
// scheduler's silence; any children started were stopped first:
//   NOT_FOUND            a binary is missing from bin_dir (nothing was started; pstrain-worker
//                        is not looked for with a worker_cmd);
//   INTERNAL             no temp dir, or a child could not be spawned;
//   UNAVAILABLE          no free port for the metrics or the dashboard;
//   DEADLINE_EXCEEDED    the scheduler wrote no port file within port_timeout;
//   FAILED_PRECONDITION  the scheduler exited 0 without writing its port file.
//
// REQUIRES: called from the main thread before any other thread is started: SIGINT, SIGTERM and
// SIGHUP are blocked for the process while it runs and read through a signalfd, which works only if
// no thread has them unblocked. The previous signal mask is restored on return. Children are
// reaped by pid, so SIGCHLD must not be ignored.
absl::StatusOr<int> RunLocalCluster(const LaunchOptions& options);

}  // namespace launch
}  // namespace pstrain

#endif  // PSTRAIN_LAUNCH_LAUNCHER_H_
