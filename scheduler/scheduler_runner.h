// Runs the scheduler of one job from start to exit: reads the data set's sizes, builds the shard
// map, serves the Scheduler service, watches heartbeats, waits for the job to end, writes the run
// summary and lingers briefly so servers learn the outcome.
//
//   Run(): validate -> read data headers -> shard map -> [state_dir: restore a saved state]
//          -> listen (port_file) -> watchdog loop -> FINISHED/FAILED -> summary JSON
//          -> grace period / linger -> shut down
//
// The port also serves gRPC health checking (transport/health.h): SERVING from listening until the
// job ends, NOT_SERVING after; so does the separate plaintext health port, if any (health_port),
// which a probe can reach when the main port demands TLS. The final model, assembled from the servers' shards
// (SubmitFinalShard), is checked (model::ParseModelFile) and written to the job's final_model_path
// before the job can finish.
// No request may be larger than the job's largest model file (Options::max_model_bytes for an
// external model) plus slack.
// For an external model (JobSpec.model "external") no data is read and there is no shard map
// until a worker declares the model (Scheduler::DeclareModel); with a state_dir the accepted
// model file is kept there (StateFile::SaveDeclaredModel) and restored with the state.
// Stop() with a state_dir ends Run without ending the job (nothing more is saved), so a
// restarted scheduler goes on with it; without one, the job fails with CANCELLED.
//
// With http_port set, the dashboard and its JSON API are served while Run() runs, also during the
// linger. The scheduler's metrics (scheduler/scheduler_metrics.h) go to Options::metrics.
//
// Thread-safe: Run() is called once, from one thread; Stop() and port() from any thread.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_RUNNER_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_RUNNER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "transport/transport_security.h"
#include "proto/job.pb.h"

namespace pstrain {
namespace scheduler {

class SchedulerRunner {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    // 0: let the system pick a free port.
    int port = 0;
    // If set, the chosen port is written here (decimal, newline) once the server listens. The
    // file appears atomically (temp file + rename), so a launcher can poll for it.
    std::string port_file;
    // If set, the run summary (JSON) is written here when the job ends, also on failure.
    std::string summary_json;
    absl::Duration heartbeat_interval = absl::Milliseconds(500);
    absl::Duration dead_after = absl::Milliseconds(3000);
    // Scheduler::Options::hold_up_after (zero: dead_after).
    absl::Duration hold_up_after = absl::ZeroDuration();
    absl::Duration startup_timeout = absl::Seconds(300);
    // SYNC with checkpoints: how long a dead server's rank may wait for a replacement before the
    // job fails (Scheduler::Options::server_recovery_timeout).
    absl::Duration server_recovery_timeout = absl::Seconds(60);
    // A job on a data stream: how often the stream's folder is looked at for newly ready files.
    absl::Duration stream_poll = absl::Milliseconds(500);
    // A job on a data stream: progressive validation's window, in files (>= 1).
    int progressive_window_files = 3;
    // If set, the scheduler keeps its state in this folder (scheduler/state_file.h) and, started
    // again with a state there, goes on with that job instead of starting afresh (listening on the
    // port it had when `port` is 0). See "Restart" in scheduler/scheduler.h.
    std::string state_dir;
    // With state_dir: how long roles ride out an outage of the scheduler before they give up
    // (RegisterResponse.reconnect_ms).
    absl::Duration reconnect = absl::Seconds(30);
    // After the job ended, keep answering this long (at least; also until every server has heard
    // the end, up to 2 x dead_after), so that roles started late (e.g. restarted by an
    // orchestrator) learn the outcome: FINISHED lets them exit 0. Stop() cuts it short.
    absl::Duration linger = absl::ZeroDuration();
    // With health_port > 0, a plaintext listener on health_host:health_port serving only
    // grpc.health.v1.Health, with the main port's status (transport/health.h HealthServer). 0: none.
    std::string health_host = "0.0.0.0";
    int health_port = 0;
    // How the listener is secured (transport/transport_security.h); null: plaintext on loopback only.
    std::shared_ptr<const TransportSecurity> security;
    // External models (JobSpec.model "external"): the largest model file a worker may declare or
    // submit as the final model, in bytes (4 per float plus a little per tensor). A built-in
    // model's limit follows from its size. Requests beyond the limit are refused by gRPC with
    // RESOURCE_EXHAUSTED before any handler runs.
    int64_t max_model_bytes = int64_t{256} << 20;
    // The dashboard and JSON API (scheduler/dashboard_http.h), with /metrics beside them, on
    // http_host:http_port. 0: off; -1: any free port (written to http_port_file if set, like
    // port_file).
    std::string http_host = "127.0.0.1";
    int http_port = 0;
    std::string http_port_file;
    // Where the scheduler's metrics go (borrowed; must outlive Run). The caller may serve it on
    // a port of its own (--metrics_port) and names that listener's "host:port" in
    // metrics_address, for /api/targets. Null: a registry of the runner's own, served only at
    // the dashboard's /metrics.
    metrics::Registry* metrics = nullptr;
    std::string metrics_address;
  };

  // INVALID_ARGUMENT for a bad job (after ApplyJobDefaults) or bad options (port or health_port
  // outside [0, 65535], http_port outside [-1, 65535], non-positive durations, a negative
  // hold_up_after, dead_after <= heartbeat_interval, reconnect below dead_after with a state_dir).
  static absl::StatusOr<std::unique_ptr<SchedulerRunner>> Create(JobSpec job, Options options);

  // Runs the job to its end; blocks. OK when the job FINISHED; otherwise why it did not: the data
  // reader's error for a bad data dir, the state file's error (DATA_LOSS for a damaged file,
  // FAILED_PRECONDITION for another job's), UNAVAILABLE when the port or the health port cannot
  // be bound (the http port too: the job fails with it), or the job's failure (UNAVAILABLE for a dead role,
  // DEADLINE_EXCEEDED for the startup timeout, ABORTED for a reported failure, CANCELLED after Stop()). Call once.
  absl::Status Run();

  // Ends Run() early: the job fails with CANCELLED "scheduler stopped" (with a state_dir the job's
  // saved state stays as it was, and Run() returns CANCELLED) and Run() returns without the grace
  // period or linger. Safe from any thread, before, during or after Run(); not from a signal
  // handler.
  void Stop();

  // The port the server listens on, once Run() has started it; 0 before.
  int port() const { return port_.load(); }
  // The dashboard's port (Options::http_port), once Run() has started it; 0 before and without.
  int http_port() const { return http_port_.load(); }

 private:
  SchedulerRunner(JobSpec job, Options options) : job_(std::move(job)), options_(std::move(options)) {}

  bool stop_requested() const;

  const JobSpec job_;
  const Options options_;
  std::atomic<int> port_{0};
  std::atomic<int> http_port_{0};

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_RUNNER_H_
