// The gRPC implementation of SchedulerApi (scheduler/client/scheduler_api.h): a client of the scheduler's
// service (proto/scheduler.proto), shared by servers, workers and the launcher, plus a heartbeat
// thread.
//
// Every call carries a deadline. Calls that the scheduler parks (WaitUntilRunning, Barrier) take
// their own timeout; the rest use the rpc timeout given at creation.
//
// Riding out a scheduler restart. A scheduler that keeps its state (--state_dir) tells roles at
// registration how long to ride out its outage (RegisterResponse.reconnect_ms, the reconnect
// window; 0 otherwise, and before Register). Within that window every call but Heartbeat,
// ReportFailure and GetJobStatus is retried on UNAVAILABLE (and, unless the scheduler parks it, on
// DEADLINE_EXCEEDED) with a backoff of 50 ms doubling to 1 s, for at most the window from its
// first failure (parked calls also within their own timeout): a parked call cut by the scheduler's
// death is simply entered again. Retries are safe: registration is idempotent by instance id,
// released barriers stay released, and ReportProgress and LeaseWork carry sequence numbers this
// client stamps (1, 2, ... per process; the same on a retry) by which the scheduler recognises a
// call it has already answered. With a window, every call (Heartbeat too) waits for the connection
// up to its deadline rather than failing at once while the scheduler is away.
#ifndef PSTRAIN_SCHEDULER_CLIENT_SCHEDULER_CLIENT_H_
#define PSTRAIN_SCHEDULER_CLIENT_SCHEDULER_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "scheduler/client/scheduler_api.h"
#include "transport/transport_security.h"
#include "proto/scheduler.grpc.pb.h"

namespace pstrain {

// Thread-safe: any method may be called from any thread at the same time.
class SchedulerClient : public SchedulerApi {
 public:
  // Does not connect yet; the first call does. `address` is host:port.
  // `security` secures the channel (transport/transport_security.h); null: plaintext.
  static absl::StatusOr<std::unique_ptr<SchedulerClient>> Create(
      const std::string& address, absl::Duration rpc_timeout,
      std::shared_ptr<const TransportSecurity> security = nullptr);

  const std::string& address() const { return address_; }

  // How long calls are retried while the scheduler is unreachable (see above). Register sets it
  // from the scheduler's answer; zero before.
  absl::Duration reconnect_window() const;
  void set_reconnect_window(absl::Duration window);

  // Where this role serves Prometheus metrics ("host:port", common/metrics_flags.h), sent with
  // Register so the scheduler can list every role's metrics; empty (the default): none. Call before
  // Register.
  void set_metrics_address(const std::string& address);

  // The role's build fingerprint (model/build_fingerprint.h), sent with Register so that the
  // scheduler can refuse a role of another build; 0 (the default): not sent. Call before Register.
  void set_build_fingerprint(uint64_t fingerprint);

  // The session credential Register got (empty before): what the role's other clients (a
  // worker's PsClient) send to act as its rank.
  std::string session_credential() const;

  // Registers this role. Retries UNAVAILABLE (the scheduler may start after us) and
  // RESOURCE_EXHAUSTED (too many workers joined the running job in the last minute) until `timeout`;
  // other errors (e.g. FAILED_PRECONDITION: the job is full) are returned at once. On success every
  // later call carries the session credential the answer holds (common/session_credential.h).
  absl::StatusOr<RegisterResponse> Register(Role role, const std::string& address, absl::Duration timeout,
                                            const LocalEndpoint& local = {}) override;

  // Waits until every role has registered and returns the complete view. A job that failed while
  // waiting gives ABORTED; no answer within `timeout` gives DEADLINE_EXCEEDED.
  absl::StatusOr<ClusterView> WaitUntilRunning(absl::Duration timeout) override;

  // The current view, without waiting.
  absl::StatusOr<ClusterView> GetClusterView() override;

  // Blocks until every participant has entered barrier `name`, the job fails (ABORTED) or
  // `timeout` passes (DEADLINE_EXCEEDED).
  absl::Status Barrier(const std::string& name, BarrierRequest::Participants who, Role role, int rank,
                       absl::Duration timeout) override;

  absl::StatusOr<HeartbeatResponse> Heartbeat(Role role, int rank) override;
  // The same with a whole request (a server's table usage).
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request);
  absl::StatusOr<LeaseResponse> LeaseWork(int worker_rank, int epoch) override;
  absl::Status ReportProgress(const ProgressReport& report) override;
  absl::Status ReportFailure(Role role, int rank, const std::string& message) override;
  absl::StatusOr<JobStatus> GetJobStatus() override;
  // An operator's request for another server count (Scheduler.Scale). Not retried: the answer
  // says whether it was taken.
  absl::StatusOr<ScaleResponse> Scale(int servers);
  // Cancels the pending change of the server count (ScaleRequest.cancel), the same way.
  absl::StatusOr<ScaleResponse> CancelScale();
  absl::Status Leave(Role role, int rank, const std::string& reason) override;
  // LeaseWork for evaluation: a range of the test set to evaluate after `epoch`.
  absl::StatusOr<LeaseResponse> LeaseEval(int worker_rank, int epoch) override;
  // Server `server_rank` holds checkpoints of `steps` (ascending); sent after registering and
  // after each checkpoint written, for the scheduler's choice of a restore step.
  absl::Status ReportCheckpoints(int server_rank, const std::vector<int64_t>& steps,
                                 int64_t* keep_from = nullptr) override;
  // A SYNC step of this server waits for `report.waiting_for` (server/slow_step_watch.h).
  absl::Status ReportSlowStep(const SlowStepReport& report) override;
  // Sends one shard of the final model (its chunks' current values) when the scheduler asked for
  // it (HeartbeatResponse.send_final_shards); returns once the scheduler took it, and for the last
  // shard once the model is written. Retried like ReportProgress; its deadline is at least a
  // minute (a large model is written and fsynced before the answer).
  absl::Status SubmitFinalShard(const FinalShard& shard) override;
  // JobSpec.model "external": declares the model this worker trains (Scheduler.DeclareModel):
  // its model_file as model::SerializeModelFile writes it (names, shapes, initial values), the
  // data set sizes, the tensors averaged rather than trained (names of tensors of the file; see
  // ModelDeclaration.averaged_tensors for what to push for them) and the embedding tables the
  // model looks rows up in. Call after Register and before WaitUntilRunning: the job runs only once a
  // declaration was accepted. OK when it is the first accepted or matches the accepted one;
  // INVALID_ARGUMENT or DATA_LOSS saying what is wrong (a mismatch, a bad file), FAILED_PRECONDITION
  // for a built-in model's job. Retried like ReportProgress (a retry of an accepted declaration
  // matches it); its deadline is at least a minute (the scheduler parses and saves the file).
  absl::Status DeclareModel(ModelDeclaration declaration) override;
  // JobSpec.model "external": the accepted declaration's model file, whose values are the initial
  // weights. FAILED_PRECONDITION before a declaration was accepted. Retried like GetClusterView;
  // its deadline is at least a minute (the file may be large).
  absl::StatusOr<std::string> GetInitialModel() override;

 private:
  SchedulerClient(std::string address, absl::Duration rpc_timeout, const TransportSecurity& security);

  // Sets the deadline and returns a "what" prefix for errors, e.g. "heartbeat to scheduler at X".
  // One unary call of `method` with deadline `timeout`; errors are prefixed "<what> to scheduler
  // at <address>".
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(grpc::Status (Scheduler::Stub::*method)(grpc::ClientContext*, const Request&,
                                                                        Response*),
                                const Request& request, absl::string_view what, absl::Duration timeout) const;

  std::string Prepare(grpc::ClientContext* context, absl::string_view what, absl::Duration timeout) const;

  // Call, retried within the reconnect window (see the file comment). `parked`: `timeout` bounds
  // all attempts together, and DEADLINE_EXCEEDED is final.
  template <typename Request, typename Response>
  absl::StatusOr<Response> CallRetrying(grpc::Status (Scheduler::Stub::*method)(grpc::ClientContext*, const Request&,
                                                                                Response*),
                                        const Request& request, absl::string_view what, absl::Duration timeout,
                                        bool parked) const;

  const std::string address_;
  const absl::Duration rpc_timeout_;
  // Sent with Register so that a retried registration keeps its rank (proto/scheduler.proto).
  const std::string instance_id_;
  const std::unique_ptr<Scheduler::Stub> stub_;
  std::atomic<int64_t> reconnect_window_ns_{0};
  mutable absl::Mutex mu_;
  std::string session_credential_ ABSL_GUARDED_BY(mu_);
  std::string metrics_address_ ABSL_GUARDED_BY(mu_);
  uint64_t build_fingerprint_ ABSL_GUARDED_BY(mu_) = 0;
  // The next sequence number for ReportProgress and LeaseWork.
  std::atomic<int64_t> next_seq_{1};
};

// Sends a heartbeat every `interval` on its own thread until the job ends, and reports the end once.
//
// `on_end` is called exactly once, from the heartbeat thread: OK when the job state becomes FINISHED,
// ABORTED("job failed: <reason>") when it becomes FAILED, UNAVAILABLE when no heartbeat got through
// for longer than `give_up_after` (and at least two attempts failed), the scheduler's own error when
// it refuses the heartbeat (e.g. FAILED_PRECONDITION: this worker is no longer a member). The
// scheduler counts as lost only after max(give_up_after, the client's reconnect window). `on_membership_change` (may be
// empty) is called from the same thread with the new membership epoch each time an answer carries a higher one than the
// last. The destructor stops the thread (and does not call on_end if it has not been called yet). `client` is borrowed
// and must outlive this object.
class Heartbeater {
 public:
  // `describe` (may be empty) adds what a role reports with each beat, on the heartbeat thread;
  // `on_answer` (may be empty) sees every answer of a running job, on the same thread, after
  // on_membership_change (servers learn there which final shards to send).
  Heartbeater(SchedulerClient* client, Role role, int rank, absl::Duration interval, absl::Duration give_up_after,
              std::function<void(absl::Status)> on_end, std::function<void(int64_t)> on_membership_change = nullptr,
              std::function<void(HeartbeatRequest*)> describe = nullptr,
              std::function<void(const HeartbeatResponse&)> on_answer = nullptr);
  ~Heartbeater();

  Heartbeater(const Heartbeater&) = delete;
  Heartbeater& operator=(const Heartbeater&) = delete;

  // The membership epoch of the latest answer (0 before the first).
  int64_t membership_epoch() const;

  // Asks for the next heartbeat now rather than a whole interval after the last one, but not
  // sooner than kMinNudgeGap after it (servers: a leased batch was applied, and the scheduler
  // should learn soon that a lease is complete). Cheap; callable from any thread and under
  // other locks.
  void Nudge();
  static constexpr absl::Duration kMinNudgeGap = absl::Milliseconds(50);

 private:
  void Loop();
  // Waits until the next heartbeat is due (an interval after `last`, the end of the last one, or
  // kMinNudgeGap after it when nudged); false when the heartbeater is stopping.
  bool WaitForNextBeat(absl::Time last);

  SchedulerClient* const client_;
  const Role role_;
  const int rank_;
  const absl::Duration interval_;
  const absl::Duration give_up_after_;
  const std::function<void(absl::Status)> on_end_;
  const std::function<void(int64_t)> on_membership_change_;
  const std::function<void(HeartbeatRequest*)> describe_;
  const std::function<void(const HeartbeatResponse&)> on_answer_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool nudged_ ABSL_GUARDED_BY(mu_) = false;
  int64_t membership_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_CLIENT_SCHEDULER_CLIENT_H_
