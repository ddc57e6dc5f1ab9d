// A worker's membership of a job over gRPC: what a worker process does before and around its
// training loop. The built-in worker (worker/worker_runner.h) and the Python package both use it,
// then drive a TrainingSession (worker/training_session.h) that it creates.
//
//   Join()                  Register(WORKER) with the scheduler -> rank, the job
//   DeclareModel()          external models only: the model this worker trains (the first
//                           worker's declaration defines the job's tensors and initial weights)
//   Start()                 WaitUntilRunning -> view; connect to every server; heartbeat;
//                           Barrier("servers-ready")
//   NewSession()            a TrainingSession over this member's clients
//   Finish(status)          the end: a failure is reported to the scheduler (so the job fails
//                           now, not at the heartbeat timeout); with a final model, a worker
//                           that is done waits for the job's end, so that once it returns the
//                           model the scheduler assembles from the servers' shards is written
//
// While started, a heartbeat thread watches the job: when the job fails elsewhere, every call to
// the servers is cancelled, so a worker parked in a step never hangs, and outcome() says why.
//
// Thread safety: one thread drives it; RequestLeave and outcome may be called from any thread.
#ifndef PSTRAIN_WORKER_JOB_MEMBER_H_
#define PSTRAIN_WORKER_JOB_MEMBER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "transport/transport_security.h"
#include "model/param_spec.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "worker/training_session.h"
#include "worker/worker_metrics.h"

namespace pstrain {
class HealthServer;
class Heartbeater;
class SchedulerClient;
}  // namespace pstrain

namespace pstrain::worker {

class PsClient;

struct MemberOptions {
  std::string scheduler_address;  // host:port
  absl::Duration rpc_timeout = absl::Seconds(60);
  // TCP connections to each server not on this host (worker/ps_client.h); >= 1.
  int tcp_connections = 2;
  // How long to wait for the scheduler to answer at all, and for the job to start running.
  absl::Duration startup_timeout = absl::Minutes(2);
  // Set from another thread (SIGTERM) to leave the job gracefully; may be null, in which case
  // RequestLeave is the way to ask.
  const std::atomic<bool>* leave = nullptr;
  // With health_port > 0, a gRPC health service (transport/health.h) listens on
  // health_host:health_port: NOT_SERVING until the worker has registered, SERVING while it is in
  // the job, NOT_SERVING once it is done (Finish). 0: none.
  std::string health_host = "0.0.0.0";
  int health_port = 0;
  // How the channels to the scheduler and the servers are secured (transport/transport_security.h);
  // null: plaintext.
  std::shared_ptr<const TransportSecurity> security;
  // Where the worker's metrics (worker/worker_metrics.h) are registered, borrowed for the
  // member's life; the member sets its constant labels (role="worker", rank) once registered.
  // Null: a registry of the member's own, which nothing serves (the reports still carry the
  // traffic and staleness).
  metrics::Registry* metrics = nullptr;
  // "host:port" where `metrics` is served over HTTP, sent with Register for the scheduler to list
  // (SchedulerClient::set_metrics_address); empty: not served.
  std::string metrics_address;
  // With `metrics` null and metrics_port != 0, the member serves its own registry (with the
  // process_* series) at http://metrics_host:metrics_port/metrics for its life (-1: any free port)
  // and registers that address (metrics_address, unless set; a wildcard host registers as
  // metrics_advertise_host, or 127.0.0.1 when that is empty). For workers that have no main() of
  // ours: the Python package.
  std::string metrics_host = "0.0.0.0";
  int metrics_port = 0;
  std::string metrics_advertise_host;
};

class JobMember {
 public:
  // Registers a worker with the scheduler. The job's defaults are applied and it is validated
  // (INVALID_ARGUMENT naming the field). ABORTED when the job failed before this worker joined;
  // the scheduler's errors otherwise (FAILED_PRECONDITION: the job is full). A job that already
  // finished is not an error: see finished().
  static absl::StatusOr<std::unique_ptr<JobMember>> Join(const MemberOptions& options);
  ~JobMember();

  int rank() const { return rank_; }
  const JobSpec& job() const { return job_; }
  // True when the job was over (FINISHED) before this worker registered: nothing to do.
  bool finished() const { return finished_; }

  // For a job whose model is "external": declares the model this worker trains, `params` (names
  // and shapes, in order) with `initial_values` (their flat layout), and the data set's sizes.
  // `averaged` names tensors that are not trained but averaged over the workers by the servers
  // (a module's buffers, e.g. BatchNorm's running statistics; proto/scheduler.proto
  // ModelDeclaration). `tables` are the embedding tables the model looks rows up in
  // (ModelDeclaration.tables: the job's, or adopted when the job declares none). The first
  // worker's declaration defines the job; every later one must match it (the scheduler's
  // INVALID_ARGUMENT names the first difference). FAILED_PRECONDITION for a built-in model's job
  // or after Start. REQUIRES: Join succeeded and the job is not finished.
  absl::Status DeclareModel(const std::vector<model::ParamSpec>& params, absl::Span<const float> initial_values,
                            int64_t train_samples, int64_t test_samples, const std::vector<std::string>& averaged = {},
                            const std::vector<TableSpec>& tables = {});

  // Waits until the job runs (every role registered, the model declared), connects to every
  // server, starts heartbeating and waits until every server holds its shard. The view. From
  // here on job() holds the view's tables (ClusterView.tables: a declared model's too).
  absl::StatusOr<ClusterView> Start();

  // A training session for `params` (the job's tensors, in the shard map's order) under the
  // view Start() returned. (A job's final model is not the worker's to send: the scheduler
  // assembles it from the servers' shards.)
  // REQUIRES: Start succeeded.
  absl::StatusOr<std::unique_ptr<TrainingSession>> NewSession(std::vector<model::ParamSpec> params);

  // Asks the session(s) of this member to leave the job after the current step (SIGTERM).
  void RequestLeave() { leave_.store(true); }
  bool leave_requested() const { return leave_.load(); }

  // The first reason the job ended badly that the heartbeat saw (OK while none).
  absl::Status outcome() const;

  // Ends this worker's part with `status`: the health service (if any) says NOT_SERVING, a
  // failure is reported to the scheduler (unless it is the job's own failure, ABORTED), and
  // explained by outcome() when the heartbeat saw the job fail first. Returns the status the
  // process should end with. With OK, a job with a final_model_path and no leave requested, it
  // first blocks until the heartbeat sees the job end (the scheduler writes the model once every
  // worker is done; about one heartbeat interval) or a leave is requested; a job that failed
  // meanwhile is returned (ABORTED "job failed: ...").
  absl::Status Finish(absl::Status status);

 private:
  JobMember(std::unique_ptr<SchedulerClient> scheduler, const MemberOptions& options);

  const MemberOptions options_;
  const std::unique_ptr<SchedulerClient> scheduler_;
  int rank_ = -1;
  JobSpec job_;
  bool finished_ = false;
  int64_t heartbeat_ms_ = 500;
  int64_t dead_after_ms_ = 3000;
  ClusterView view_;
  std::unique_ptr<metrics::Registry> own_registry_;  // when options_.metrics is null
  std::unique_ptr<WorkerMetrics> metrics_;           // once registered
  // Serves own_registry_ (MemberOptions::metrics_port); declared after it, so it stops first.
  std::unique_ptr<HttpServer> metrics_server_;
  std::unique_ptr<PsClient> ps_;
  std::unique_ptr<Heartbeater> heartbeater_;
  std::unique_ptr<HealthServer> health_;
  std::atomic<bool> leave_{false};

  // Finish's wait for the job's end (see Finish).
  absl::Status AwaitJobEnd();
  bool LeaveRequested() const { return options_.leave != nullptr ? options_.leave->load() : leave_.load(); }

  mutable absl::Mutex mu_;
  absl::Status outcome_ ABSL_GUARDED_BY(mu_);
  // The heartbeat saw the job end (FINISHED or FAILED) or lost the scheduler.
  bool job_ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_JOB_MEMBER_H_
