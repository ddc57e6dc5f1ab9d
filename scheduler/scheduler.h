// The scheduler's core: the single source of truth of a job, free of gRPC.
//
// The Scheduler is the protocol over its parts (docs/DESIGN.md, "The scheduler: a protocol over
// its parts"): Membership (ranks, the live set, the epoch), BarrierSet, LeasePool and StreamFeed
// (the data handed out), Progress and StreamScores (what was trained and evaluated), ServerFleet
// (checkpoints, vacant ranks, the restore step, replicas), FinalModelAssembly, ServerReports and
// RetryLog. It decides what each event means for the job, tells the parts, and persists the state
// before it answers. It decides the job's state:
//
//   WAITING_FOR_ROLES --(last role registers)--> RUNNING --(every live worker sent done and
//          |                                        |      no evaluation is outstanding, and with
//          |                                        |      a final_model_path the model written
//          |                                        |      from the servers' shards)--> FINISHED
//          +--(startup timeout, dead or silent server (unless replaced, below), fewer than
//              min_workers live workers, a server's reported failure, Fail())--> FAILED
//
// Churn. A worker that misses heartbeats for dead_after (or never heartbeats within the start-up
// timeout), or holds the others up for that long (EvictHoldUpsLocked), is removed as "died", one
// that calls Leave or reports its failure as "left"; either bumps the membership
// epoch, returns its evaluation leases to the pool and its incomplete training leases as
// remainders (LeasePool), and stops barriers from waiting for it. A worker that registers while
// the job runs takes a new rank ("joined"); worker ranks are never reused.
//
// Server recovery (checkpoints on: checkpoint_every_steps or _seconds > 0, once the job runs, and
// no replicas; otherwise a dead server fails the job). Servers report the checkpoint steps they hold
// (ReportCheckpoints); the latest list per server rank is kept, also after the server died (its files stay for its
// replacement). A server that misses heartbeats for dead_after is removed as "died": its rank is
// vacant, the epoch is bumped, the view lists the live servers only and drops restore_step (a new
// recovery begins), and the job keeps RUNNING. A server that registers takes the vacant rank
// ("joined"). When no rank is vacant any more, the view's restore_step becomes the newest step
// every server rank reported a checkpoint of (NewestCommonStep; 0 when there is none), and
// restore_epoch the epoch of that registration (set with its epoch bump); both stay until the next
// recovery (a server's death) drops them, so a replacement never sees the cut of an earlier one.
// ASYNC/SSP: no restore_step; the replacement alone restores its own newest checkpoint
// (RegisterResponse.restore_own_step) and the others go on. A rank vacant for longer than
// server_recovery_timeout fails the job (UNAVAILABLE "server 1 died and no replacement registered
// within 60 s").
//
// Replicas (job.replicas = 2, once the job runs; placement and promotion: server_fleet.h). A
// server that misses heartbeats for dead_after is removed as "died" (epoch bump) and is not
// replaced: its shards are served by their copies (the view's shard_hosts). A death that takes
// the last copy of a shard fails the job (UNAVAILABLE "... held the only copy of shard 1 ...").
// A server registering while the job runs (a restarted one) gets ALREADY_EXISTS: it is not needed,
// unless it takes a rank a change of the server count adds. A change places every shard and its
// copy afresh (ServerFleet::Resize); a death while one is pending cancels it. This takes
// precedence over server recovery by checkpoints.
//
// Declared models (JobSpec.model "external"). The job's tensors, initial values and data set sizes
// come from the first model declaration a live worker sends (DeclareModel) instead of the
// Options: until one is accepted the view has no shard map and the job stays WAITING_FOR_ROLES,
// even with every role registered; it runs once both hold. Later declarations are compared with
// the accepted one and change nothing. The accepted model file is kept (GetInitialModel, for the
// servers' initial weights) and persists (Options::save_declared_model) before the state does.
// A declaration may list embedding tables (ModelDeclaration.tables): they must be the job's when
// the job declares tables; otherwise the first accepted declaration's become the job's, in the
// view (ClusterView.tables) and the state, like its tensors.
//
// The final model (job.final_model_path with Options::write_final_model). No member submits it:
// once every live worker is done, training ends (Progress::TryFinish) and the job waits, RUNNING,
// for the servers' shards. Each live server's heartbeat answer lists the shards it is the primary
// of that are still missing (HeartbeatResponse.send_final_shards); the server sends their chunks
// (SubmitFinalShard), checked against the shard map; the last one completes the model, which is
// written (the tensors of the shard map, in order) before the job is FINISHED:
//
//   workers done --> servers' heartbeat answers: send shards [0], [1], ... --> SubmitFinalShard
//     x S --> model file written --> FINISHED
//
// Meanwhile a worker that leaves or dies costs nothing (its work is done: min_workers no longer
// applies). A server that dies before its shard arrived: with replicas its copy is promoted and
// sends it; with server recovery by checkpoints the job fails (a replacement would restore an
// earlier step); otherwise its death fails the job as always. Shards are kept in memory only: a
// restarted scheduler asks again.
//
// FINISHED and FAILED are final. When the job ends every parked call is answered: view waiters get
// the view (FINISHED) or ABORTED "job failed: <reason>"; parked barriers get ABORTED.
//
// Restart (Options::persist, --state_dir). After every change of state (a registration, a lease,
// a progress report, a barrier entered, a membership change, the end) and before the call that
// caused it is answered, a Snapshot goes to Options::persist, so an answer a role saw is never
// lost; of the heartbeats only a role's first one (which starts its dead_after watch) persists. A restarted scheduler
// (Restore) goes on from the latest one at the same membership epoch (nothing changed, so no step is aborted for
// nothing): every live member gets dead_after from the restart to heartbeat again, released barriers stay released, and
// parked calls cut by the death are entered again by their callers. Retried calls are idempotent: a progress report
// whose report_seq was applied is answered OK and not counted again; a lease request repeating the last request_seq of
// its worker gets the same answer again.
//
// Thread-safe: one mutex guards the state; callbacks (`done`) run after it is released, on the
// thread whose call released them, so they may finish an RPC or call back in.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/session_credential.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"
#include "scheduler/barrier.h"
#include "scheduler/declared_tables.h"
#include "scheduler/final_model_assembly.h"
#include "scheduler/lease_pool.h"
#include "scheduler/membership.h"
#include "scheduler/progress.h"
#include "scheduler/retry_log.h"
#include "scheduler/server_fleet.h"
#include "scheduler/server_scaling.h"
#include "scheduler/server_reports.h"
#include "scheduler/status_json.h"
#include "scheduler/stream_feed.h"
#include "scheduler/stream_scores.h"
#include "scheduler/stuck_barriers.h"

namespace pstrain {
namespace scheduler {

class Scheduler {
 public:
  struct Options {
    // The job after ApplyJobDefaults; Create validates it.
    JobSpec job;
    // From BuildShardMap for the job's model and num_servers. An external model's job has none
    // until its declaration (empty here), and pinned data set sizes or 0 (see SetUpJob).
    ShardMap shard_map;
    int64_t train_samples = 0;
    int64_t test_samples = 0;
    // See TotalSteps().
    int64_t total_steps = 0;
    // A job on a data stream (JobSpec.data.stream_dir): the catalog as far as it was taken (Restore
    // sets the saved state's; empty for a new job); train_samples and total_steps are then its
    // records and trainable steps (scheduler/stream_feed.h), and they grow with RefreshStream.
    StreamState stream;
    // A job on a data stream: progressive validation's window, in files (StreamScores).
    int progressive_window_files = 3;
    // A job on a data stream with a checkpoint folder: records the catalog beside the checkpoints
    // (resume.h WriteStreamCatalog) before newly ready files are handed out; called outside the
    // lock by RefreshStream. An error keeps the new files back (the next refresh tries again).
    std::function<absl::Status(const StreamState& catalog)> record_stream;
    // Handed to roles at registration.
    absl::Duration heartbeat_interval = absl::Milliseconds(500);
    // A role silent this long (after its first heartbeat) is dead: a server fails the job, a
    // worker is removed.
    absl::Duration dead_after = absl::Milliseconds(3000);
    // The hold-up rule's limit (EvictHoldUpsLocked): a live worker that holds the others up this
    // long while it heartbeats is evicted. Zero: dead_after.
    absl::Duration hold_up_after = absl::ZeroDuration();
    // The job fails when not every role has registered this long after creation, or a role has
    // not heartbeated this long after registering.
    absl::Duration startup_timeout = absl::Seconds(300);
    // Server recovery: how long a dead server's rank may stay vacant before the job fails.
    absl::Duration server_recovery_timeout = absl::Seconds(60);
    // Resuming a job (scheduler/resume.h): the step every server restores before it serves. The
    // view carries it as restore_step (restore_epoch: the epoch at which the job starts running).
    std::optional<int64_t> resume_step;
    // The server count resume_step's checkpoints were taken under, when it is not the job's: the
    // view then carries it as restore_servers, and servers re-cut that cut into their shards. 0:
    // the job's own count.
    int resume_servers = 0;
    // A job with a checkpoint folder: records that the steps after `step` are cut on `servers`
    // servers (common/server_counts.h), when the job changes its server count at the cut of
    // `step`. Called under the lock, before the new shard map is published: no checkpoint of the
    // new count is written before it. An error abandons the change (the job goes on unchanged).
    std::function<absl::Status(int64_t step, int servers)> record_server_count;
    // This build's fingerprint (model/build_fingerprint.h): Register refuses a role that sends
    // another (FAILED_PRECONDITION naming both). 0: not checked.
    uint64_t build_fingerprint = 0;
    // Time source; tests inject their own. Default: absl::Now.
    std::function<absl::Time()> clock;
    // When the job started (wall_seconds and event times count from it); default: now. Restore
    // sets its predecessor's.
    std::optional<absl::Time> created;
    // Persistence (--state_dir; see "Restart" above). When set, called with a snapshot of the state
    // and its version (ascending) after every change of state and before the call that caused it
    // is answered; it may skip a snapshot older than one it already wrote. Called outside the
    // lock, possibly from several threads at once. A non-OK status turns the answers of that
    // call into UNAVAILABLE (the caller retries; the change stays in memory).
    std::function<absl::Status(int64_t version, const SchedulerState& state)> persist;
    // Handed to roles at registration (RegisterResponse.reconnect_ms): how long they ride out an
    // outage of this scheduler. Zero unless the state persists.
    absl::Duration reconnect = absl::ZeroDuration();
    // The final model (job.final_model_path): writes the model file assembled from the servers'
    // shards (see "The final model" above) to final_model_path; INVALID_ARGUMENT or DATA_LOSS for
    // bytes that are not a model file (nothing written), the I/O error otherwise. Called outside
    // the lock, one call at a time. When set and the job has a final_model_path, the job finishes
    // only once a model was written. Empty: the core assembles no model (SubmitFinalShard answers
    // FAILED_PRECONDITION) and does not wait for one.
    std::function<absl::Status(absl::string_view model_file)> write_final_model;
    // External model with persistence (--state_dir): makes the model file of the first accepted
    // declaration durable before the state records it (state_file.h). Called outside the lock,
    // one call at a time. An error refuses the declaration with UNAVAILABLE (nothing changes; the
    // worker retries). Empty: the declaration is kept in memory only.
    std::function<absl::Status(absl::string_view model_file)> save_declared_model;
    // External model with a checkpoint folder: records the first accepted declaration's model file
    // and tables beside the checkpoints (resume.h WriteDeclaration), called as save_declared_model
    // is and refusing the declaration the same way on an error. Empty: not recorded.
    std::function<absl::Status(absl::string_view model_file, const TableList& tables)> record_declaration;
    // Restore of an external model's job whose state records an accepted declaration: the model
    // file save_declared_model saved. Ignored otherwise.
    std::string declared_model_file;
    // A barrier still waiting this long after its first participant entered is stuck: the
    // watchdog (CheckHealth) logs who it waits for (scheduler/stuck_barriers.h), the dashboard
    // and the run summary ("stuck_barriers") list it.
    absl::Duration stuck_barrier_after = absl::Seconds(10);
  };

  // An accepted model declaration (external model).
  struct DeclaredModel {
    int worker_rank = 0;
    // The declared model file, byte for byte (model/model_file.h). Shared, never changed.
    std::shared_ptr<const std::string> model_file;
    // The tables a job that declares none adopted from it (declared_tables.h); empty otherwise.
    google::protobuf::RepeatedPtrField<TableSpec> tables;
  };

  using ViewDone = std::function<void(absl::StatusOr<ClusterView>)>;

  // INVALID_ARGUMENT when the job does not validate or the shard map does not fit it.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(Options options);

  // A restarted scheduler: goes on from `state`, a Snapshot() of its predecessor (see "Restart"
  // above). The shard map is the state's. FAILED_PRECONDITION when the state is of another job
  // (the difference is named) or the data set's sizes changed; INVALID_ARGUMENT as Create, or for
  // a state whose parts do not fit together.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Restore(Options options, const SchedulerState& state);

  // Everything a restarted scheduler needs (proto/scheduler_state.proto).
  SchedulerState Snapshot() const;

  // The port the scheduler's service listens on, kept in the state so that a restart listens
  // there again. Persists; the persist error otherwise.
  absl::Status RecordPort(int port);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Registers a role; the answer carries its rank, the job and the heartbeat settings.
  // INVALID_ARGUMENT, changing nothing, for strings past their limits (CheckRegisterRequest,
  // member_limits.h). A worker
  // registering while the job runs joins it (Membership::Register); so does a server while a server
  // rank is vacant (server recovery: the last vacancy filled sets the view's restore_step). Errors as
  // Membership::Register; ABORTED "job failed: ..." once the job has failed. Once the job has
  // finished, a new role gets OK with job_state FINISHED and no rank or job (it has nothing to
  // do and should exit 0); a re-registration still gets its rank. Every answer carries job_state.
  absl::StatusOr<RegisterResponse> Register(const RegisterRequest& request);

  // The current view; its state is the job's state.
  ClusterView View() const;

  // A job on a data stream: takes in the files made ready since the last call (StreamCatalog::
  // Refresh, outside the lock: it lists the folder and counts new files), so that the views hand
  // out their steps; persists. A stream the catalog refuses (a file that changed or vanished before
  // it was trained, a file out of name order) fails the job with the catalog's message. Returns the
  // files added (0 for a job without a stream, or one that has ended). One caller at a time.
  int RefreshStream();

  // The caller a session credential (RegisterResponse.session_credential, common/session_credential.h)
  // names, checked: signed by this scheduler (or the one it was restored from) and issued to the
  // process that registered at that rank last. UNAUTHENTICATED for a missing, malformed or forged
  // credential; PERMISSION_DENIED for the credential of an earlier process at a rank another one
  // has taken since (a replaced server). The caller compares the claims with the rank a request
  // names (CheckActsAs). Does not block but for the mutex.
  absl::StatusOr<SessionClaims> Authenticate(absl::string_view credential) const;

  // Calls `done` with the view once every role has registered (at once if they have), with the
  // view when the job finished, or ABORTED "job failed: <reason>" when it failed. Never blocks.
  void WhenRunning(ViewDone done);

  // Records a heartbeat and answers the job's state and membership epoch. INVALID_ARGUMENT for
  // table usages past their limits (CheckHeartbeatRequest). FAILED_PRECONDITION for
  // an unregistered role, or "worker 1 is no longer a member ..." for a removed worker (it should
  // exit).
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request);

  // Enters the barrier `request.name` for WORKERS (every live worker) or ALL (every live server
  // and worker) as (request.role, request.rank), role unspecified meaning WORKER; `done` gets OK
  // when every live participant has entered (see BarrierSet: a worker that dies meanwhile is no
  // longer waited for). INVALID_ARGUMENT at once, storing nothing, for a barrier that is not the
  // job's (CheckBarrierRequest, barrier_names.h); FAILED_PRECONDITION at once for a role that is
  // not live; ABORTED once the job has ended. A worker that keeps it waiting is evicted
  // (EvictHoldUpsLocked). Never blocks.
  void Barrier(const BarrierRequest& request, BarrierSet::Done done);

  // A request repeating its worker's last request_seq gets the same answer again (its answer was
  // lost); an older one ABORTED (see "Restart").
  // With request.eval: the next evaluation lease of request.epoch, in every mode (see
  // Progress::LeaseEval and EvalPool). Otherwise the next training lease (ASYNC/SSP only): a dead
  // worker's remainder first (first_batch > 0 when part of it is done), `wait` while leases are out
  // with others, `epoch_done` once every lease of the epoch is complete; FAILED_PRECONDITION in
  // SYNC mode; otherwise as LeasePool::Next.
  // Evaluation leases of an epoch whose training is not over yet (EpochTrainedLocked): `wait`.
  // Both: FAILED_PRECONDITION before every role has registered or for a worker that is not live;
  // ABORTED once the job has failed.
  absl::StatusOr<LeaseResponse> LeaseWork(const LeaseRequest& request);

  // Adds a worker's progress (also from a worker removed meanwhile: its applied steps, training
  // lease progress and evaluations count, its `done` does not); a training lease that becomes
  // complete counts its samples once. The report that completes the finish condition finishes the
  // job. INVALID_ARGUMENT, with nothing recorded, as LeasePool::Check and Progress::Add (which
  // bounds the claims by what was handed out: for ASYNC/SSP, LeasePool::BatchesHandedTo);
  // FAILED_PRECONDITION for a rank that never registered; ABORTED "job failed: ..." once the job
  // has failed. A report whose report_seq is not above the last one applied for its worker rank is
  // answered OK and not counted again.
  absl::Status ReportProgress(const ProgressReport& report);

  // A role's unrecoverable error. A worker's means that worker leaves: it is removed from the live
  // set as for Leave (its leases back in the pool, the membership epoch bumped) and its message
  // (cut to kMaxReasonBytes, member_limits.h) is logged, kept among the newest
  // kMaxFailureMessages worker failures and listed in the run summary ("worker_failures"); the
  // job fails only when fewer than min_workers live workers are left (running), quoting the
  // messages. A server's fails the job with "<role> <rank> at <address>: <message>". Ignored for
  // a member already removed, and once the job has ended.
  void ReportFailure(const FailureReport& report);

  // A worker leaves gracefully: it is removed at once ("left"), as for a death. OK when it is
  // already gone or the job has ended. FAILED_PRECONDITION for a rank that never registered.
  // Leaving below min_workers fails the job.
  // A server outside the shard map (drained, or added by a pending scale-up) is removed. A server
  // of the map asks to be drained (it was stopped, pstrain-server --drain_on_stop): the scheduler
  // plans the scale-down to one server fewer, as `pstrain-ctl scale` would, and the server leaves
  // at its cut-over. OK when a pending change drains it already; FAILED_PRECONDITION when it is not
  // the highest rank (a scale-down drains the highest ranks), and for what RequestScalingLocked
  // refuses (not SYNC, no checkpoints, another change pending, a recovery in progress, ...); an
  // INVALID_ARGUMENT for the job's last server. A refused server stops as a dead one would.
  absl::Status Leave(const LeaveRequest& request);

  // A server's checkpoint steps (strictly ascending, >= 0); they replace the rank's earlier list.
  // INVALID_ARGUMENT, with nothing recorded, for steps not ascending or negative, or more than
  // kMaxCheckpointSteps of them;
  // FAILED_PRECONDITION for a rank that is not a live server; ABORTED "job failed: ..." once the
  // job has failed.
  absl::Status ReportCheckpoints(const CheckpointReport& report);
  // What a checkpoint report's answer says (CheckpointAck.keep_from_step): SYNC with checkpoints,
  // the oldest step a recovery, a change of the server count or a resumed cut may still restore
  // (ServerFleet::RestorableStep: steps before it are never chosen again); otherwise none (-1).
  int64_t CheckpointsKeptFrom() const;
  // An operator asks for `request.servers()` servers (scheduler/server_scaling.h; the caller
  // checked the operator's credential). SYNC jobs with checkpoints, while they run, no server is
  // being replaced and (replicas) every shard has both copies; see the Scale rpc
  // (proto/scheduler.proto) for the errors.
  absl::StatusOr<ScaleResponse> Scale(const ScaleRequest& request);

  // Logs a server's slow SYNC step: the ranks it waits for, with their addresses and how long ago
  // each last heartbeated, and keeps the newest kMaxSlowSteps reports for the run summary
  // ("slow_steps"). SYNC: each live worker it waits for is held to the hold-up rule from the
  // step's first push (EvictHoldUpsLocked). FAILED_PRECONDITION for a rank that is not a live
  // server; INVALID_ARGUMENT for a negative step or wait, or more than kMaxWaitingFor ranks.
  absl::Status ReportSlowStep(const SlowStepReport& report);
  static constexpr int kMaxSlowSteps = ServerReports::kMaxSlowSteps;

  // A worker's final model: always PERMISSION_DENIED, changing nothing (the scheduler assembles
  // the model from the servers' shards; see "The final model" above). For old workers.
  absl::Status SubmitFinalModel(const FinalModel& model);

  // One shard of the final model from its primary server (see "The final model" above and
  // proto/scheduler.proto SubmitFinalShard). The shard that completes the model has it written
  // before this returns OK, and the job FINISHES. OK, changing nothing, for a shard already held
  // or once the model is written. Errors, changing nothing: FAILED_PRECONDITION without a
  // final_model_path or write_final_model, or before every live worker is done; PERMISSION_DENIED
  // from a server that is not the shard's primary (or not live); INVALID_ARGUMENT for a shard that
  // does not match the shard map or holds a non-finite value; ABORTED once the job has failed. A
  // model that cannot be written fails the job and returns the error. Blocks on the write.
  absl::Status SubmitFinalShard(const FinalShard& shard);

  // A worker declares the model of an external model's job (see "Declared models" above and
  // proto/scheduler.proto): the first valid declaration sets the job's tensors, shard map, initial
  // values, data set sizes, total steps and averaged tensors (TensorSpec.averaged in the shard
  // map), and starts the job when every role has registered; a later one is compared with it.
  // Errors, changing nothing: INVALID_ARGUMENT (mismatch, disagreement with the job's pinned
  // sizes, no tensors, an empty tensor, a non-finite value, bad sample counts, an averaged tensor
  // that is not declared or is listed twice) or DATA_LOSS (a damaged model file), naming what is wrong;
  // FAILED_PRECONDITION for a built-in model's job or a rank that is not a live worker; ABORTED
  // once the job has failed; UNAVAILABLE when the model file or the state cannot be saved.
  // Blocks on parsing the model file and on saving it.
  absl::Status DeclareModel(const ModelDeclaration& declaration);

  // The accepted declaration (external model). FAILED_PRECONDITION "no model declared yet" before
  // one, and for a built-in model's job. Never blocks beyond the lock; the bytes are shared.
  absl::StatusOr<DeclaredModel> InitialModel() const;

  // Progress snapshot with state, failure and live role counts (registered_*).
  JobStatus Status() const;

  // Fails the job with `reason` (not OK) unless it has already ended.
  void Fail(absl::Status reason);

  // The watchdog's tick. A server that heartbeated and fell silent for dead_after fails the job
  // (UNAVAILABLE), or with server recovery is removed as "died" and its rank waits for a
  // replacement; a rank vacant for longer than server_recovery_timeout fails the job
  // (UNAVAILABLE). A server registered startup_timeout ago without a heartbeat since, or not every
  // role registering within startup_timeout, fail the job (DEADLINE_EXCEEDED). A worker in either
  // case is removed as "died"; fewer than min_workers live workers then fail the job
  // (UNAVAILABLE "only 1 live worker left; the job needs at least 2 (--min_workers); ..."). Does
  // nothing once the job has ended. Also logs barriers that are stuck (Options::stuck_barrier_after).
  void CheckHealth();

  JobState state() const;
  // OK unless the job failed; then the reason it failed with.
  absl::Status failure() const;
  // Waits up to `timeout` for the job to end; true when it has.
  bool AwaitEnd(absl::Duration timeout) const;
  // True when the job has ended and every server has heartbeated since, so all know the outcome.
  bool ServersKnowTheEnd() const;

  // The run summary (Progress::SummaryJson) and a one-line outcome for the log, e.g.
  // "job FINISHED: test accuracy 0.8712, test loss 0.3621, 41234 samples/s" (with ", test AUC
  // 0.7893" after the loss when workers reported scores).
  std::string SummaryJson() const;
  std::string OutcomeLine() const;

  // --- The dashboard and metrics (scheduler/scheduler_dashboard.cc) ---
  // Each copies what it needs under the mutex and returns plain data; formatting (status_json.h)
  // happens outside, in the caller.

  // The dashboard's status: job state, progress, members (with metrics addresses), per-worker
  // and per-server statistics, membership events, slow steps and stuck barriers. The scheduler
  // itself is not among the members (the HTTP layer knows its addresses).
  scheduler::DashboardStatus DashboardStatus() const;
  // The timeline points from `since` on (Timeline::Since).
  std::vector<TimelinePoint> TimelineSince(int64_t since, size_t max_points, int64_t* next) const;
  // A scrape target for every live server and worker that serves metrics, labelled role and rank.
  std::vector<MetricsTarget> MetricsTargets() const;

 private:
  explicit Scheduler(Options options);

  // What to do once mu_ is released: persist the state, then answer parked barriers and view
  // waiters.
  struct Deferred {
    BarrierSet::Answers barrier_answers;
    std::vector<ViewDone> view_waiters;
    absl::StatusOr<ClusterView> view_answer;
    // Set by SaveLocked when the state changed and persists.
    std::optional<SchedulerState> snapshot;
    int64_t version = 0;
  };
  // Persists deferred.snapshot, if any, then runs the answers (as UNAVAILABLE if that failed).
  // Returns the persist status.
  absl::Status Run(Deferred deferred);
  // Puts a snapshot of the state into `deferred` when the state persists.
  void SaveLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persists the state now, holding mu_: for a change that others act on as soon as they see it
  // and that a restarted scheduler must know (a cut-over to another server count: the servers
  // re-shard at once). SaveLocked's snapshot is persisted after mu_ is released, and a scheduler
  // killed in between would restart without the change. A failed save is logged; the change stays
  // in memory and the next save persists it.
  void SaveNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SchedulerState SnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lease pool's and the progress's options for the given sizes.
  static LeasePool::Options LeaseOptions(const Options& o, int64_t train_samples);
  static Progress::Options ProgressOptions(const Options& o, absl::Time created, int64_t train_samples,
                                           int64_t test_samples, int64_t total_steps);
  // Signs session credentials with `signer` from now on (Create: a fresh key; Restore: the saved one).
  void UseSessionKey(std::unique_ptr<SessionSigner> signer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Restore's work on a fresh scheduler; `declared_model_file`: Options::declared_model_file.
  absl::Status RestoreFrom(const SchedulerState& state, std::string declared_model_file);
  // Every role registered (and, for an external model, a declaration was accepted): the job runs.
  // Answers parked view waiters and tells the barriers who takes part.
  void StartRunningLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job's model is known: always for a built-in model, after the first accepted
  // declaration for an external one.
  bool ModelKnownLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `epoch`'s training is over, so its evaluation leases may go out: ASYNC/SSP as
  // LeasePool::EpochTrained; SYNC when every live worker that reported has reported the epoch's
  // last step (SyncEpochEndStepLocked) and one at least has. Stays true once the epoch's first
  // evaluation lease went out; true for an epoch outside the job.
  bool EpochTrainedLocked(int epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SYNC: the global step that ends `epoch` (capped by total_steps).
  int64_t SyncEpochEndStepLocked(int epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SYNC: the live workers whose latest report is of a step before `epoch`'s end (0 < step < end).
  std::vector<int> SyncLaggingWorkersLocked(int epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The watchdog's hold-up rule (CheckHealth): evicts, as "died", every live worker that holds
  // the others up for longer than the limit (HoldUpLimit) while it may well heartbeat on: a
  // barrier that waits for it (the start barrier "servers-ready": startup_timeout, as loading data
  // and building the model may take long), a SYNC step a server reported waiting for its push
  // (ReportSlowStep; from the step's first push, unless the worker has since reported a later
  // step), a SYNC epoch end that another worker reported reaching and whose evaluation waits for
  // this one's report, its reported step unchanged for the limit, or an evaluation lease it holds
  // for longer than the limit and 10 times the longest a reported lease took.
  // A hold-up counts only from the latest membership change or restore (the step or barrier is
  // redone or re-entered then), and nobody is evicted while a live server has not heartbeated for
  // 3 heartbeat intervals (a dying server holds every worker up; its death comes first).
  void EvictHoldUpsLocked(absl::Time now, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LeaseWork without the retry check.
  absl::StatusOr<LeaseResponse> LeaseWorkLocked(const LeaseRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Time Now() const { return options_.clock(); }
  // Options::hold_up_after, or dead_after when that is zero.
  absl::Duration HoldUpLimit() const {
    return options_.hold_up_after > absl::ZeroDuration() ? options_.hold_up_after : options_.dead_after;
  }
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ == FINISHED || state_ == FAILED; }
  ClusterView ViewLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status JobFailedError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the job to FINISHED or FAILED; parked view waiters and barriers go to `deferred`.
  void EndLocked(JobState state, absl::Status failure, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the barriers who is live now.
  void PublishParticipantsLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a live worker ("died" or "left", because of `reason`), then applies min_workers and
  // the finish condition. Does nothing for a worker already gone.
  void RemoveWorkerLocked(int rank, ChangeKind kind, absl::string_view reason, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Server recovery: removes the live server `rank` ("died", because of `reason`); its rank is
  // vacant from now on and restore_step is dropped.
  void RemoveServerLocked(int rank, absl::string_view reason, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- Changing the server count (scheduler_scaling.cc) ---
  // The job's server count now: the ranks of its shard map.
  int ServersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return fleet_.num_servers(); }
  // A server rank outside the shard map: added by a pending scale-up, or drained by a done
  // scale-down and not gone yet. It has no shard, checkpoints or recovery.
  bool OutsideMapLocked(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return rank >= ServersLocked(); }
  // A server outside the map died or left: it is removed, and a pending scale-up that counted on
  // it waits for another.
  void RemoveOutsideServerLocked(int rank, ChangeKind kind, absl::string_view reason, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks for `to` servers on behalf of `who` ("an operator", for the log): the checks and the
  // plan of Scale (the plan is returned); the change then waits for its servers and its cut.
  absl::StatusOr<std::string> RequestScalingLocked(int to, absl::string_view who, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every server of the map is live and serves the restore of the newest cut it was asked for
  // (HeartbeatResponse.map_restored_epoch).
  bool MapRestoredLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leave of server `rank` of the map: plans its drain (Leave).
  absl::Status DrainServerLocked(int rank, absl::string_view reason, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `request`, a new server's registration, grows the job by one (JobSpec.max_servers):
  // every rank of the map is live and no server outside it, no change is pending and the job has
  // fewer than max_servers.
  bool GrowsForLocked(const RegisterRequest& request) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels the pending change of the server count (an operator's request, a scale-up whose
  // servers did not register in time, a failed cut-over), logging `why`: the job stays at its
  // count, and the live servers of the added ranks are dropped (they learn it from the view and
  // exit).
  void CancelScalingLocked(absl::string_view why, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels a scale-up still waiting for its servers server_recovery_timeout after it was asked
  // for (a health tick).
  void CancelLateScalingLocked(absl::Time now, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the pending change ready once every added rank is live, and cuts over when its cut is
  // there.
  void AdvanceScalingLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ASYNC (AdvanceScalingLocked): once every training lease is complete under the hold on fresh
  // ones, asks every server of the map for a checkpoint of one step beyond all of theirs (the quiet
  // cut; asked again, higher, should a server report a step past it). Returns whether a quiet cut
  // is asked for and every lease is complete (the cut-over may follow).
  bool AdvanceQuietCutLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ASYNC/SSP, server `beat.rank()`'s heartbeat: advances a pending change (the heartbeat's
  // confirmations may have completed the last lease out) and answers the quiet cut that server is
  // to write (HeartbeatResponse.checkpoint_at_step), or 0.
  int64_t QuietCutForLocked(const HeartbeatRequest& beat, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ASYNC: a ready change holds fresh training leases back until it cuts over and every server of
  // the new map serves (LeasePool::set_hold_fresh).
  bool HoldsFreshLeasesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes the map of the pending change's count, with every server restoring the cut of
  // `step` re-sharded.
  void CutOverLocked(int64_t step, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The changes done and the pending one, for the dashboard, the metrics and the summary.
  std::vector<ServerCountChangeStatus> ServerCountChangesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a dead server is replaced rather than failing the job (SYNC with checkpoints, running).
  bool RecoversServersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replicas: whether a dead server's shards are served by their copies (running, replicas = 2).
  bool PromotesReplicasLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replicas: removes the dead server `rank` and promotes the copies of the shards it served, or
  // fails the job when it held a shard's last copy. Cancels a pending change of the server count.
  void PromoteReplicasLocked(int rank, absl::string_view reason, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job finishes only once a final model was written (Options::write_final_model).
  bool NeedsFinalModel() const {
    return !options_.job.final_model_path().empty() && options_.write_final_model != nullptr;
  }
  // Finishes the job when Progress::TryFinish says so and the final model, if needed, is written;
  // with one still to write, the job waits for the servers' shards from then on.
  void MaybeFinishLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ASYNC/SSP: records what server `server_rank` has applied (HeartbeatRequest.applied_leases);
  // the leases this completes count their samples. Returns whether it completed any.
  bool ConfirmLeasesLocked(int server_rank, const AppliedLeases& applied, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts the samples of leases just completed, and finishes the job if that ends it. Returns
  // whether there were any.
  bool CountLeasesLocked(const std::vector<LeaseRecord>& completed, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job waits for the servers' final shards: running, training over (every live
  // worker was done), a final model needed and not yet written.
  bool AwaitsFinalShardsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shards still wanted from live server `rank` (HeartbeatResponse.send_final_shards).
  std::vector<int> FinalShardsWantedLocked(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks who sent `shard` (its primary, live) and hands it to final_model_; nothing changes on
  // error (see SubmitFinalShard).
  absl::Status TakeFinalShardLocked(const FinalShard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Server recovery while the job waits for the final shards: a server that died before its shard
  // arrived fails the job (its replacement would restore an earlier step). True when it did.
  bool FailForLostFinalShardLocked(int rank, absl::string_view reason, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION unless (role, rank) is a live member.
  absl::Status CheckLive(Role role, int rank, absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "membership epoch 7, live workers [0, 2]" (and ", live servers [0]" while a server rank is
  // vacant), for log lines.
  std::string MembershipLine() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The barriers waiting longer than stuck_barrier_after at `now`, with who they wait for.
  std::vector<StuckBarrierStatus> StuckBarriersLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Options options_;
  // When the job started (a restored scheduler keeps its predecessor's).
  const absl::Time created_;

  mutable absl::Mutex mu_;
  BarrierSet barriers_ ABSL_GUARDED_BY(mu_);
  JobState state_ ABSL_GUARDED_BY(mu_) = WAITING_FOR_ROLES;
  // A job on a data stream: its catalog (Options.stream, then RefreshStream).
  std::optional<StreamFeed> stream_ ABSL_GUARDED_BY(mu_);
  // ... and its progressive validation by file.
  std::optional<StreamScores> stream_scores_ ABSL_GUARDED_BY(mu_);
  // A stream: the position below which every record is trained (SYNC: the slowest live worker's
  // reported step, in records; a worker that reported nothing yet counts from where it started:
  // a joiner is not waited for, one there from the start holds it at the job's first step).
  int64_t StreamTrainedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether live worker `worker_rank` joined the job while it ran (a membership event says so;
  // the newest Membership::kMaxEvents are kept, so a long-ago joiner reads as one there from the
  // start, which only holds a stream's watermark back until its first report).
  bool JoinedWhileRunningLocked(int worker_rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stream: the position below which no record will be read again, even after a rollback to a
  // checkpoint (with checkpoints: the newest cut every server has, or the step resumed from), so
  // that files wholly before it may be gone.
  int64_t StreamKeptFromLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stream: where it stands, with the newest `max_files` files' progressive validation.
  // REQUIRES: stream_.
  StreamStatus StreamStatusLocked(size_t max_files) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  absl::Time ended_at_ ABSL_GUARDED_BY(mu_);
  Membership membership_ ABSL_GUARDED_BY(mu_);
  // What the model gives: the data set sizes and total steps (the Options', or for an external
  // model the accepted declaration's), and the lease pool and progress built from them (an
  // external model's are built again when the declaration is accepted, before the job runs).
  int64_t train_samples_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t test_samples_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t total_steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<LeasePool> leases_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Progress> progress_ ABSL_GUARDED_BY(mu_);
  // External model: the accepted declaration; unset before.
  std::optional<DeclaredModel> declared_ ABSL_GUARDED_BY(mu_);
  // Serializes declarations, so that two first declarations cannot both be accepted (taken
  // before mu_, never while holding it).
  absl::Mutex declare_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<ViewDone> view_waiters_ ABSL_GUARDED_BY(mu_);
  // Server recovery and replicas: checkpoints, vacant ranks, the restore step, where shards live.
  ServerFleet fleet_ ABSL_GUARDED_BY(mu_);
  ServerScaling scaling_ ABSL_GUARDED_BY(mu_);
  // Idempotent retries of progress reports and lease requests, by worker rank.
  RetryLog retries_ ABSL_GUARDED_BY(mu_);
  // Persistence: the listening port, how often this state was restored, and the version of the
  // newest snapshot taken.
  int port_ ABSL_GUARDED_BY(mu_) = 0;
  int restarts_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t snapshot_version_ ABSL_GUARDED_BY(mu_) = 0;
  // The final model's shards as they arrive, and whether it was written.
  FinalModelAssembly final_model_ ABSL_GUARDED_BY(mu_);
  // Serializes final model writes (taken before mu_, never while holding it).
  absl::Mutex model_write_mu_;
  // Issues and checks session credentials; its key is in the state, so a restart keeps it.
  std::unique_ptr<SessionSigner> signer_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SessionVerifier> verifier_ ABSL_GUARDED_BY(mu_);
  // The servers' table usage, traffic and slow steps, for the summary and the dashboard.
  ServerReports server_reports_ ABSL_GUARDED_BY(mu_);
  // The newest workers' failure messages (ReportFailure), at most kMaxFailureMessages, each
  // bounded: for the log, the run summary and a min_workers failure. Saved (SchedulerState).
  std::deque<std::string> worker_failures_ ABSL_GUARDED_BY(mu_);
  // When this scheduler restored its predecessor's state; InfinitePast for a fresh one.
  absl::Time restored_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The last time EvictHoldUpsLocked found a server of the map restoring a cut.
  absl::Time servers_restoring_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // SYNC steps servers reported waiting for a worker's push (ReportSlowStep), by worker rank: the
  // step and when its wait began. Dropped once the worker reports a later step or is gone.
  struct SlowWait {
    int64_t step = 0;
    absl::Time since;
  };
  std::map<int, SlowWait> slow_waits_ ABSL_GUARDED_BY(mu_);
  // SYNC: the epoch whose evaluation leases a worker that reported its end first asked for before
  // every live worker had, and since when (EvictHoldUpsLocked). Not persisted.
  std::optional<std::pair<int, absl::Time>> eval_waiting_ ABSL_GUARDED_BY(mu_);
  // ASYNC/SSP: the workers the end of the epoch waits for (LeasePool::EpochEndWaitsFor), each with
  // the batches its leases had applied on the servers when last seen and since when that count
  // has not moved (EvictHoldUpsLocked). Not persisted.
  struct LeaseHoldUp {
    int64_t confirmed = 0;
    absl::Time since;
  };
  std::map<int, LeaseHoldUp> lease_holdups_ ABSL_GUARDED_BY(mu_);
  // Barriers that were stuck: logged by the watchdog, kept for the run summary.
  StuckBarrierLog stuck_log_ ABSL_GUARDED_BY(mu_);
  // ASYNC/SSP: since when the end of the current epoch has waited for leases still out
  // (LeasePool::EpochEndWaitsFor); unset while it waits for none. Kept by the watchdog.
  std::optional<absl::Time> epoch_end_waiting_since_ ABSL_GUARDED_BY(mu_);
};

// Optimizer updates the job makes on each server. SYNC: epochs x SyncStepsPerEpoch(train_samples,
// batch_size x num_workers), capped by max_steps when it is > 0. ASYNC/SSP: epochs x
// ceil(train_samples / batch_size), capped likewise. `sync_steps_per_epoch` is the SYNC count of
// global batches in one epoch (data::SyncStepsPerEpoch).
int64_t TotalSteps(const JobSpec& job, int64_t train_samples, int64_t sync_steps_per_epoch);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_H_
