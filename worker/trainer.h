// The worker's training loop: pull weights, compute a gradient on this worker's samples, push it,
// and evaluate leased parts of the test set after each epoch.
//
//   SYNC        global batch t (view.global_batch samples of the epoch permutation) is split among
//               the live workers by slot (data::SyncSliceOfGlobalBatch). Each step is one PushPull
//               per server (push the step-t gradient, get the weights after update t+1). When the
//               membership changes mid-step the servers answer ABORTED: the worker fetches the new
//               view and recomputes the same global batch under it, so the maths is unchanged and
//               the step is applied once. A worker that joins a running job starts at the servers'
//               current step.
//   ASYNC, SSP  the scheduler leases ranges of the permutation; each batch is one PushPull whose
//               `step` is this worker's clock in the epoch and which names its (lease, batch), so a
//               server applies it once even when a dead worker's lease is re-leased. The worker
//               reports each lease's progress; once it is idle it tells the servers (FinishEpoch);
//               when every lease of the epoch is complete it waits at the epoch barrier, then pulls
//               the epoch's final weights.
//   Evaluation  after each epoch (or only the last), workers lease ranges of the test set from the
//               scheduler and report each lease's results once, so every test sample counts once
//               even if a worker dies mid-evaluation.
//
// Training statistics are reported only for steps that succeeded, so per-epoch sample counts stay
// exact through recomputed steps. When `leave` becomes true (SIGTERM) the worker finishes its
// current step (sync) or lease (async/ssp), reports, leaves the job and Run() returns OK.
//
// Not thread-safe: Run() is called once, on one thread.
#ifndef PSTRAIN_WORKER_TRAINER_H_
#define PSTRAIN_WORKER_TRAINER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/scheduler_client.h"
#include "data/assignment.h"
#include "data/dataset.h"
#include "model/model.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "worker/layer_pusher.h"
#include "worker/push_encoder.h"
#include "worker/ps_client.h"
#include "worker/shard_layout.h"
#include "worker/shard_routing.h"

namespace pstrain::worker {

struct TrainerOptions {
  int rank = 0;
  JobSpec job;  // with its defaults applied (common/job_spec.h)
  ClusterView view;
  // How often to send training statistics to the scheduler (besides every epoch end).
  absl::Duration report_interval = absl::Milliseconds(500);
  // How long the epoch barrier may wait for the other workers.
  absl::Duration barrier_timeout = absl::Minutes(10);
  // How long one sync step may keep being aborted by membership changes (or find a server down,
  // waiting for its replacement) before giving up.
  absl::Duration membership_timeout = absl::Minutes(2);
  // Set (from another thread) to ask the worker to leave the job gracefully. May be null.
  const std::atomic<bool>* leave = nullptr;
  // Called once with the final weights, after the last epoch's evaluation and before the last
  // (done) report, so that what it sends (the final model) reaches the scheduler before the job
  // can finish. An error ends Run with it. May be empty.
  std::function<absl::Status(const std::vector<float>& weights)> before_done;
};

class Trainer {
 public:
  // Everything borrowed must outlive the Trainer. Fails with INVALID_ARGUMENT when the model does
  // not match the view's shard map or the data set does not match the model.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(TrainerOptions options,
                                                        SchedulerClient* scheduler, PsClient* ps,
                                                        model::Model* model, const data::Dataset* train,
                                                        const data::Dataset* test);

  // Trains the whole job (or until asked to leave) and sends the final report. Blocks. Errors name
  // the failing call.
  absl::Status Run();

  // The weights after Run() (the job's final model, unless the worker left early).
  const std::vector<float>& weights() const { return weights_; }

  // True when Run() ended because the worker left the job.
  bool left() const { return left_; }

 private:
  Trainer(TrainerOptions options, SchedulerClient* scheduler, PsClient* ps, model::Model* model,
          const data::Dataset* train, const data::Dataset* test, ShardLayout layout);

  absl::Status RunSync();
  absl::Status RunLeased();

  // One sync step over global batch `step_in_epoch` of `perm`, recomputed under a new view as often
  // as the membership changes.
  absl::Status SyncStep(const std::vector<int64_t>& perm, int64_t step_in_epoch, int epoch);
  // Computes the gradient of the samples at permutation positions `range`, pushes it to every server
  // and installs the weights they answer with. Statistics go to pending_ only on success.
  // ASYNC/SSP pushes name their batch (lease id, batch in lease) so servers apply it once.
  absl::Status Step(const std::vector<int64_t>& perm, data::Range range, int64_t step, int epoch,
                    int64_t lease_id = 0, int64_t lease_batch = 0);
  // Step's communication, after the batch is gathered: compute the gradient and send it as one
  // PushPull per shard afterwards (ASYNC/SSP, or SYNC with overlap off), or layer by layer during
  // backward (SYNC with overlap, see LayerPusher). Both add the step's times to *times and leave the
  // new weights in the model.
  absl::Status PushAfterBackward(int count, int64_t step, int epoch, int64_t lease_id, int64_t lease_batch,
                                 model::BatchStats* stats, StepTimes* times);
  absl::Status PushDuringBackward(int count, int64_t step, int epoch, model::BatchStats* stats, StepTimes* times);
  // The push fields every shard's request of a step shares.
  void FillPushHeader(int64_t step, int epoch, int count, int64_t lease_id, int64_t lease_batch,
                      PushRequest* push) const;
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
  absl::Status InstallWeights();
  // This worker's position among the live workers of view_, or FAILED_PRECONDITION if it is gone.
  absl::StatusOr<int> Slot() const;
  // Evaluates leased ranges of the test set until the epoch's evaluation is complete.
  absl::Status Evaluate(int epoch);
  absl::Status EndEpoch(int epoch, bool last);
  absl::Status MaybeReport(int epoch, bool force);
  // Replicas: a dead server's shard is served by its promoted copy, so the job goes on.
  bool Replicated() const { return view_.shard_hosts_size() > 0; }
  // Whether a server's death (UNAVAILABLE) is a membership change to wait out rather than an
  // error: its shard's copy is promoted (replicas) or a replacement restores a checkpoint.
  bool ServersRecover() const {
    return Replicated() || CheckpointsOn(options_.job);
  }
  bool LeaveRequested() const { return options_.leave != nullptr && options_.leave->load(); }
  absl::Status Leave(int epoch);

  const TrainerOptions options_;
  SchedulerClient* const scheduler_;
  PsClient* const ps_;
  model::Model* const model_;
  const data::Dataset* const train_;
  const data::Dataset* const test_;
  const ShardLayout layout_;

  ClusterView view_;  // The latest view this worker knows; replaced on membership changes.
  std::vector<ShardRoute> routes_;  // By shard, from view_ (set in Run).
  std::vector<float> weights_;
  std::vector<float> grad_;
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_y_;
  std::vector<OutgoingPush> push_;       // One per server, reused every step.
  std::vector<IncomingPull> pulled_;     // One per server.
  PushRequest header_;                   // SYNC with overlap: the fields every part carries.
  LayerPusher pusher_;
  std::unique_ptr<PushEncoder> encoder_;  // The job's gradient compression (set in Create).
  // SYNC with overlap: the request ids of the step being sent (see PushDuringBackward).
  struct OverlapIds {
    int64_t step = -1;
    int64_t membership_epoch = -1;
    uint64_t first = 0;
  } overlap_ids_;
  uint64_t next_request_id_;

  int64_t global_step_ = 0;
  // Set by AwaitMembership when the servers rolled back to a checkpoint of this step.
  std::optional<int64_t> rewind_to_;
  // SYNC with checkpoint_every_seconds: the worker in slot 0 marks a step's pushes with
  // PushRequest.checkpoint once the interval has passed since the last step it marked.
  absl::Time last_checkpoint_ask_ = absl::Now();
  bool ask_checkpoint_ = false;
  bool left_ = false;
  // Training statistics not yet reported.
  ProgressReport pending_;
  absl::Time last_report_ = absl::InfinitePast();
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_TRAINER_H_
