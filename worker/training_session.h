// The worker library: the whole worker protocol behind a small API that a training loop drives.
// The built-in trainer (worker/trainer.h) and the Python package (python/) are two such loops.
//
// A loop asks Next() what to do, does it, and says how it went:
//
//   session->Next(&work)                      blocks until there is something to do
//     kTrain     gradient of work.samples ->  BeginStep(); compute into gradient(), calling the
//                                             returned sink (if any) as layers finish;
//                                             EndStep(stats) -> kApplied (new weights are in
//                                             weights()) or kRecompute (compute it again:
//                                             the next Next() says what)
//     kEvaluate  test samples [begin, end) -> ReportEvaluation(stats)
//     kDone      the job is over (or this worker left it): stop
//
// Everything else happens inside: which samples this worker trains on (SYNC: its slice of the
// global batch under the current membership; ASYNC/SSP: batches of leases from the scheduler),
// pulling the initial weights, pushing to every shard (and its backup) with the job's gradient
// clipping and compression, per-layer pushes during backward (SYNC overlap), membership changes (a step
// refused with ABORTED is recomputed under the new view; a dead server is waited out when its
// shard has a copy or a checkpoint), rollbacks to a checkpoint, epoch barriers, evaluation
// leases, progress reports (only for applied steps, so sample counts stay exact), the final
// model, and leaving when asked to (`leave`).
//
//   SYNC        global batch t (view.global_batch samples of the epoch permutation) is split among
//               the live workers by slot (data::SyncSliceOfGlobalBatch). Each step is one PushPull
//               per server (push the step-t gradient, get the weights after update t+1). When the
//               membership changes mid-step the servers answer ABORTED: the session fetches the
//               new view and hands out the same global batch under it, so the maths is unchanged
//               and the step is applied once. A worker that joins a running job starts at the
//               servers' current step.
//   ASYNC, SSP  the scheduler leases ranges of the permutation; each batch is one PushPull whose
//               `step` is this worker's clock in the epoch and which names its (lease, batch), so a
//               server applies it once even when a dead worker's lease is re-leased. The session
//               reports each lease's progress; once it is idle it tells the servers (FinishEpoch);
//               when every lease of the epoch is complete it waits at the epoch barrier, then
//               pulls the epoch's final weights.
//   Evaluation  after each epoch (or only the last), the session hands out leased ranges of the
//               test set and reports each lease's results once, so every test sample counts once
//               even if a worker dies mid-evaluation.
//
// It talks to the scheduler and the servers only through SchedulerApi and PsApi, and tells time
// only through a Clock, so it holds no gRPC and its recovery paths are unit-tested in-process.
//
// Not thread-safe: one thread drives it. The gradient sink's calls come from that thread too.
//
// Implementation: the work and its bookkeeping in training_session.cc, membership changes in
// training_session_membership.cc, pushes and pulls in training_session_push.cc.
#ifndef PSTRAIN_WORKER_TRAINING_SESSION_H_
#define PSTRAIN_WORKER_TRAINING_SESSION_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "scheduler/client/scheduler_api.h"
#include "data/assignment.h"
#include "data/score_histogram.h"
#include "model/model.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "worker/layer_pusher.h"
#include "worker/ps_api.h"
#include "worker/pull_staleness.h"
#include "worker/push_encoder.h"
#include "worker/shard_layout.h"
#include "worker/shard_routing.h"
#include "worker/sparse_rows_cache.h"
#include "worker/worker_metrics.h"

namespace pstrain::worker {

struct SessionOptions {
  int rank = 0;
  JobSpec job;  // with its defaults applied (common/job_spec.h)
  ClusterView view;
  // The model's tensors, in the shard map's order: their sizes must match the view's shard map.
  std::vector<model::ParamSpec> params;
  // How often to send training statistics to the scheduler (besides every epoch end).
  absl::Duration report_interval = absl::Milliseconds(500);
  // How long the epoch barrier may wait for the other workers.
  absl::Duration barrier_timeout = absl::Minutes(10);
  // How long one step may keep being aborted by membership changes (or find a server down,
  // waiting for its replacement) before giving up.
  absl::Duration membership_timeout = absl::Minutes(2);
  // Set (from another thread) to ask the worker to leave the job gracefully. May be null.
  const std::atomic<bool>* leave = nullptr;
  // Borrowed; must outlive the session.
  Clock* clock = Clock::Real();
  // Where the session counts its steps, samples and staleness, and whose traffic totals its
  // reports carry (the transport counts the bytes: give it metrics->traffic()). Borrowed; must
  // outlive the session. Null: the session keeps metrics of its own, unserved, so its reports
  // still carry staleness (their traffic then stays 0).
  WorkerMetrics* metrics = nullptr;
};

class TrainingSession {
 public:
  // What to do next (see the file comment). Valid until the next call of Next().
  struct Work {
    enum Kind { kTrain, kEvaluate, kDone };
    Kind kind = kDone;
    int epoch = 0;
    // kTrain: the update this gradient is for (SYNC: the global step; ASYNC/SSP: this worker's
    // clock in the epoch), and the training samples, by index into the data set, in batch order.
    int64_t step = 0;
    absl::Span<const int64_t> samples;
    // kEvaluate: the test samples [begin, end).
    int64_t begin = 0;
    int64_t end = 0;
    // kDone: true when this worker left the job (`leave`) rather than saw it to its end.
    bool left = false;
  };

  enum class StepResult {
    kApplied,    // the servers took the step; weights() holds the weights after it
    kRecompute,  // the step was refused (membership changed, rollback): ask Next() again
  };

  // Checks the options against each other: INVALID_ARGUMENT when the params do not match the
  // view's shard map, the view lists no worker, a SYNC view has no global batch, or the job's
  // compression is malformed. Borrowed pointers must outlive the session.
  static absl::StatusOr<std::unique_ptr<TrainingSession>> Create(SessionOptions options, SchedulerApi* scheduler,
                                                                 PsApi* ps);

  // The model's weights and the gradient buffer, flat, in the params' layout. The loop reads
  // weights() and writes gradient(); both stay at the same address for the session's life, so a
  // caller may alias its tensors to them.
  absl::Span<float> weights() { return absl::MakeSpan(weights_); }
  absl::Span<float> gradient() { return absl::MakeSpan(grad_); }
  // Bumped each time new values are written into weights(), so a loop whose model keeps its own
  // copy knows when to reload it.
  int64_t weights_version() const { return weights_version_; }

  const SessionOptions& options() const { return options_; }
  int rank() const { return options_.rank; }
  const JobSpec& job() const { return options_.job; }
  // The latest view this worker knows.
  const ClusterView& view() const { return view_; }
  // Steps this worker has pushed and had applied (SYNC: the global step it is at).
  int64_t global_step() const { return global_step_; }

  // Fills *work with the next thing to do; blocks while there is none yet (waiting for a lease,
  // a barrier, the others' evaluation). The first call pulls the initial weights. After kDone
  // it keeps answering kDone. Errors are final: a failed job (ABORTED), this worker declared dead
  // (FAILED_PRECONDITION), a timeout (DEADLINE_EXCEEDED), or the failing call's error.
  absl::Status Next(Work* work);

  // kTrain: starts pushing the step. Returns where to report gradients that are ready, layer by
  // layer, while backward runs (SYNC with overlap; descending tensor order, each tensor once), or
  // nullptr when the whole gradient is pushed by EndStep. FAILED_PRECONDITION, changing nothing,
  // unless Next just handed out kTrain work that has not begun (the Python package lets any
  // script call this, so misuse is an error, not a crash).
  absl::StatusOr<model::GradientSink*> BeginStep();
  // The same as BeginStep's sink: the gradients of tensors [first, end) are in gradient(). For
  // loops that cannot hold the sink (the Python package). No-op when BeginStep returned nullptr.
  void GradientReady(int first, int end);
  // kTrain: the gradient of the step's samples is in gradient() (stats.loss_sum over them):
  // pushes it (what BeginStep's sink has not sent yet) and installs the new weights.
  // FAILED_PRECONDITION, changing nothing, unless BeginStep began this step. Other errors are
  // final.
  absl::StatusOr<StepResult> EndStep(const model::BatchStats& stats);
  // Drops a step that the loop could not compute (e.g. its own error): calls in flight end first.
  void AbandonStep();

  // kEvaluate: the results of the work's test samples. A CTR model also passes `scores`, its
  // predictions on those samples (one each; borrowed for the call), from which the scheduler
  // computes the test AUC of the whole test set (EpochSummary.test_auc); other models pass none.
  // INVALID_ARGUMENT, reporting nothing (the lease stays with this worker, to be reported again),
  // when `scores` holds other than stats.samples predictions. Other errors are the scheduler's.
  absl::Status ReportEvaluation(const model::BatchStats& stats, const data::ScoreHistogram* scores = nullptr);

  // Embedding tables (JobSpec.tables; their ids are their positions there). A loop whose model
  // has tables calls PullRows with the batch's keys once per kTrain step (after BeginStep, before
  // computing) and per kEvaluate piece: keys[t] are table t's keys, strictly ascending. The rows
  // at the step's weights land in rows(t) (keys[t].size() x dim floats, row i for key i), and
  // row_gradient(t) is zeroed to the same size; the loop writes there the gradient of the mean
  // loss per row, which EndStep pushes with the dense gradient (to each key's server: the key
  // hash). A training pull refused by a membership change is not an error here: the loop
  // computes on, and EndStep answers kRecompute. INVALID_ARGUMENT (nothing changes) for keys out
  // of order or a wrong table count; FAILED_PRECONDITION outside a begun step or an evaluation;
  // other errors are final.
  //
  // A loop may also pull some tables at a time (a module per table, each pulling as its forward
  // runs): PullRows(tables, keys) pulls table tables[i]'s keys[i] only, keeping the rows and row
  // gradients of the step's other tables. BeginStep forgets the last step's keys, so a table not
  // pulled in a step has no rows to push. Pulling a table again in a step replaces its keys, rows
  // and row gradients. INVALID_ARGUMENT also for an unknown or repeated table id.
  int num_tables() const { return sparse_ == nullptr ? 0 : sparse_->num_tables(); }
  absl::Status PullRows(const std::vector<absl::Span<const uint64_t>>& keys);
  absl::Status PullRows(absl::Span<const int> tables, const std::vector<absl::Span<const uint64_t>>& keys);
  absl::Span<float> rows(int table) { return sparse_->rows(table); }
  absl::Span<float> row_gradient(int table) { return sparse_->row_gradient(table); }

 private:
  enum class Phase { kStart, kTrain, kEvaluate, kDone };
  // ASYNC/SSP: the lease being trained.
  struct Lease {
    int64_t id = 0;
    data::Range range;
    int64_t batches = 0;
    int64_t next_batch = 0;
    std::string grant;            // LeaseResponse.grant: every push of the lease carries it
    int64_t granted_unix_ms = 0;  // LeaseResponse.granted_unix_ms: so does every push
  };

  // How long to wait before asking again when a server has not yet learnt the newest membership
  // epoch, or the scheduler has no lease free yet.
  static constexpr absl::Duration kRetryPause = absl::Milliseconds(25);
  // How long a worker watches the view for a server that stopped answering before it tries again.
  static constexpr absl::Duration kUnavailablePatience = absl::Seconds(1);
  // How often a worker caught up with a data stream asks for a newer view.
  static constexpr absl::Duration kStreamPause = absl::Milliseconds(100);

  TrainingSession(SessionOptions options, SchedulerApi* scheduler, PsApi* ps, ShardLayout layout);

  // "0,1,3": the live workers' ranks, for the log.
  static std::string LiveRanks(const ClusterView& view);

  absl::Time Now() const { return options_.clock->Now(); }
  bool Sync() const { return options_.job.mode() == SYNC; }
  // The job trains on a data stream (SYNC only): steps become trainable as files arrive.
  bool Streaming() const { return IsStreamJob(options_.job); }
  // Text formats are read in file order: a batch is a contiguous run of records.
  bool InFileOrder() const;
  // The samples of a range of positions: the epoch permutation's, or the records themselves in file
  // order. Valid until the next call.
  absl::Span<const int64_t> SamplesOf(data::Range range);
  // A stream: waits (reporting, fetching the view every kStreamPause) until global_step_ is
  // trainable; false when the stream ended before it, or the worker is asked to leave.
  absl::StatusOr<bool> AwaitStreamStep();
  // A stream: fetches the view and takes its stream part (ready files and records, total steps)
  // when it is not behind the one held; ABORTED when the job failed. Membership changes are taken
  // in where a push is refused for them.
  absl::Status FollowStream();
  absl::Status Start();
  // kTrain work for the current sync step / lease batch; false when there is none (the epoch
  // ended, or the worker left).
  absl::StatusOr<bool> NextSyncBatch(Work* work);
  absl::StatusOr<bool> NextLeasedBatch(Work* work);
  // kEvaluate work; false once the epoch's evaluation is complete (the epoch end is done then).
  absl::StatusOr<bool> NextEvaluation(Work* work);
  // Counts an applied step and moves on.
  absl::Status StepApplied();
  // The step was refused with `status`: waits out the membership change, or returns `status`
  // when it is not one.
  absl::Status StepRefused(const absl::Status& status);
  // The epoch's training is over: evaluate (if due), then EndEpoch.
  void StartEpochEnd(int epoch, bool last);
  absl::Status EndEpoch();
  absl::Status PushAfterBackward(StepTimes* times);
  // optimizer.clip_grad_norm > 0: scales gradient() to that L2 norm over the trained tensors when
  // it is longer (overlap is off then: the whole gradient must be known first). Averaged tensors
  // (TensorSpec.averaged) carry (pulled - local value), not a gradient: neither counted nor scaled.
  void ClipGradient();
  absl::Status FinishPushDuringBackward(StepTimes* times);
  // The push fields every shard's request of a step shares.
  void FillPushHeader(PushRequest* push) const;
  // ASYNC/SSP: tells every server this worker has no work in `epoch` for now (retried while a
  // server has not learnt of this worker yet).
  absl::Status FinishEpoch(int epoch);
  // Notes in pending_ that `batches_done` batches of lease `lease_id` are pushed.
  void RecordLeaseProgress(int64_t lease_id, int64_t batches_done);
  // Pulls from every server; returns the smallest step the servers answered with.
  absl::StatusOr<int64_t> PullWeights(int64_t step, int epoch);
  // PullWeights, retried while servers answer ABORTED because the membership is changing.
  absl::StatusOr<int64_t> PullWeightsWhenCurrent(int64_t step, int epoch);
  // After an ABORTED answer (or UNAVAILABLE from a server that may have died): adopts the
  // scheduler's newer view if there is one, else pauses briefly (a server has not learnt the
  // newest epoch yet). UNAVAILABLE: watches the view for up to a second for the server to be
  // declared dead first. DEADLINE_EXCEEDED past `give_up`; ABORTED if the job failed.
  absl::Status AwaitMembership(const absl::Status& aborted, absl::Time give_up);
  // The scheduler's view, once no server rank is vacant (a replacement registered); ABORTED if
  // the job failed; DEADLINE_EXCEEDED past `give_up`.
  absl::StatusOr<ClusterView> FetchView(absl::Time give_up);
  // The view's shard map is another version than the one this session routes by (the job changed
  // its server count, docs/design/resharding.md): rebuilds the layout and everything kept per
  // server (push and pull buffers, the push encoder, staleness, the rows cache) for it. Only
  // between steps, with no call in flight; a SYNC step of the old map is recomputed (the servers
  // restored a cut under the new map). INVALID_ARGUMENT, changing nothing, for a map that does
  // not fit the model.
  absl::Status FollowShardMap(const ClusterView& view);
  // The push encoder for `view`'s map over layout_ (JobSpec.compression; averaged tensors exact).
  static absl::StatusOr<std::unique_ptr<PushEncoder>> NewEncoder(const JobSpec& job, const ShardMap& map,
                                                                 const ShardLayout* layout);
  absl::Status InstallWeights();
  // FAILED_PRECONDITION unless rows may be pulled now (see PullRows).
  absl::Status CheckPullable() const;
  // One rows-only pull of the cached keys from every shard at `step`.
  absl::Status PullCachedRows(int64_t step);
  // This worker's position among the live workers of view_, or FAILED_PRECONDITION if it is gone.
  absl::StatusOr<int> Slot() const;
  absl::Status MaybeReport(int epoch, bool force);
  // Counts a step's predictions (BatchStats.predictions) into train_bins_, and a stream's into
  // file_scores_ too.
  void AddTrainScores(const model::BatchStats& stats);
  // Score bins as AddTrainScores counts them, as the wire's histogram.
  static void BinsToProto(const std::map<uint32_t, std::pair<uint64_t, uint64_t>>& bins, pstrain::ScoreHistogram* out);
  // ASYNC/SSP: the staleness of each shard's push-pull answer in pulled_, into the metrics and
  // the pending report.
  void CountStaleness();
  // Replicas: a dead server's shard is served by its promoted copy, so the job goes on.
  bool Replicated() const { return view_.shard_hosts_size() > 0; }
  // Whether a server's death (UNAVAILABLE) is a membership change to wait out rather than an
  // error: its shard's copy is promoted (replicas) or a replacement restores a checkpoint.
  bool ServersRecover() const { return Replicated() || CheckpointsOn(options_.job); }
  bool LeaveRequested() const { return options_.leave != nullptr && options_.leave->load(); }
  absl::Status Leave(int epoch);
  void SetPermutation(int epoch);

  // Constant after construction.
  const SessionOptions options_;
  SchedulerApi* const scheduler_;
  PsApi* const ps_;
  // Follows the view's shard map (FollowShardMap): its address is constant, so pusher_ and
  // encoder_ may point to it.
  ShardLayout layout_;
  const bool overlap_;

  ClusterView view_;                // The latest view this worker knows; replaced on membership changes.
  std::vector<ShardRoute> routes_;  // By shard, from view_.
  std::vector<float> weights_;
  // SYNC with overlap: weights_ as the step began. The pusher copies each server's answer into
  // weights_ as it arrives, so when another server then refuses the step, this is what the step
  // is computed on again (a server that answered applied the step already).
  std::vector<float> step_weights_;
  std::vector<float> grad_;
  int64_t weights_version_ = 0;
  std::vector<OutgoingPush> push_;    // One per server, reused every step.
  std::vector<IncomingPull> pulled_;  // One per server.
  PushRequest header_;                // SYNC with overlap: the fields every part carries.
  LayerPusher pusher_;
  std::unique_ptr<PushEncoder> encoder_;
  // The batch's embedding rows (null for a model without tables), and a training pull of them
  // that was refused (the step is then recomputed).
  std::unique_ptr<SparseRowsCache> sparse_;
  absl::Status rows_refused_;
  // The request ids of the push being sent. The same step under the same view (and, ASYNC/SSP,
  // the same leased batch) is sent with the same ids, however often it is sent: a server that
  // stored it (or some of its parts) before the step was refused elsewhere, or whose answer was
  // lost on the way, then takes the copy for a retry rather than a second, conflicting push.
  struct AttemptIds {
    int64_t step = -1;
    int64_t membership_epoch = -1;
    int epoch = -1;
    int64_t lease_id = -1;
    int64_t lease_batch = -1;
    uint64_t first = 0;
  } attempt_ids_;
  // The first request id of the step being sent (LayerPusher::kIdsPerStep of them).
  uint64_t AttemptRequestIds();
  uint64_t next_request_id_;

  Phase phase_ = Phase::kStart;
  std::vector<int64_t> perm_;      // The epoch permutation of perm_epoch_ (not for InFileOrder data).
  std::vector<int64_t> in_order_;  // SamplesOf's answer for InFileOrder data.
  int perm_epoch_ = -1;
  int epoch_ = 0;  // The data epoch being trained (SYNC: of global_step_).
  int64_t global_step_ = 0;
  // The kTrain work handed out and not yet ended.
  struct Pending {
    bool active = false;
    bool begun = false;
    int64_t step = 0;
    int64_t num_samples = 0;
    int64_t lease_id = 0;
    int64_t lease_batch = 0;
    absl::Time handed_out;
    std::string lease_grant;
    int64_t lease_granted_unix_ms = 0;
  } step_;
  // When the step being retried gives up (set when it is first handed out).
  absl::Time give_up_ = absl::InfiniteFuture();
  // ASYNC/SSP.
  std::optional<Lease> lease_;
  int64_t clock_ = 0;                // Pushes this epoch: the SSP clock.
  bool finished_epoch_ = false;      // FinishEpoch sent since its last lease: it holds nobody back (SSP).
  bool waiting_for_stream_ = false;  // ASYNC on a stream: caught up, asking for leases until more are ready.
  // The epoch end in progress (Phase::kEvaluate).
  int eval_epoch_ = 0;
  bool eval_last_ = false;
  int64_t eval_lease_id_ = 0;  // The evaluation lease handed out and not reported yet; 0: none.
  // Set by AwaitMembership when the servers rolled back to a checkpoint of this step.
  std::optional<int64_t> rewind_to_;
  // SYNC with checkpoint_every_seconds: the worker in slot 0 marks a step's pushes with
  // PushRequest.checkpoint once the interval has passed since the last step it marked.
  absl::Time last_checkpoint_ask_;
  bool ask_checkpoint_ = false;
  bool left_ = false;
  // Training statistics not yet reported.
  ProgressReport pending_;
  // Progressive validation: the predictions of the samples trained since the last report (each
  // before the update it led to), by bin of data::ScoreHistogram: (positives, negatives). Sent as
  // TrainStats.scores.
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> train_bins_;
  // A stream: the same by file (index in view_.stream()), with the predictions' log losses. Sent as
  // TrainStats.files.
  struct FileScores {
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> bins;
    double log_loss_sum = 0;
  };
  std::map<int64_t, FileScores> file_scores_;
  // Metrics: metrics_ is options_.metrics or own_metrics_ (over own_registry_).
  std::unique_ptr<metrics::Registry> own_registry_;
  std::unique_ptr<WorkerMetrics> own_metrics_;
  WorkerMetrics* metrics_ = nullptr;
  PullStaleness staleness_;
  // The traffic totals up to the last report: the next one carries what came since.
  TrafficMeter::Totals reported_traffic_;
  absl::Time last_report_ = absl::InfinitePast();
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_TRAINING_SESSION_H_
