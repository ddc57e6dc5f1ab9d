// The worker's training loop: pull weights, compute a gradient on this worker's samples, push it,
// and evaluate this worker's slice of the test set after each epoch.
//
//   SYNC        global batch t = positions [t*B*W, (t+1)*B*W) of the epoch permutation; this rank
//               takes its B-sample slice (data/assignment.h). Each step is one PushPull per server
//               (push the step-t gradient, get the weights after update t+1), so a step costs one
//               round trip.
//   ASYNC, SSP  the scheduler leases ranges of the permutation; each batch is one PushPull whose
//               `step` is this worker's clock in the epoch. After its last lease the worker tells
//               the servers (FinishEpoch), waits at the epoch barrier, then pulls the epoch's final
//               weights for evaluation.
//
// Not thread-safe: Run() is called once, on one thread. Cancel() may be called from any thread.
#ifndef PSTRAIN_WORKER_TRAINER_H_
#define PSTRAIN_WORKER_TRAINER_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/scheduler_client.h"
#include "data/assignment.h"
#include "data/dataset.h"
#include "model/mlp.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "worker/ps_client.h"
#include "worker/shard_layout.h"

namespace pstrain::worker {

struct TrainerOptions {
  int rank = 0;
  JobSpec job;
  ClusterView view;
  // How often to send training statistics to the scheduler (besides every epoch end).
  absl::Duration report_interval = absl::Milliseconds(500);
  // How long the epoch barrier may wait for the other workers.
  absl::Duration barrier_timeout = absl::Minutes(10);
};

class Trainer {
 public:
  // Everything borrowed must outlive the Trainer. Fails with INVALID_ARGUMENT when the model does
  // not match the view's shard map or the data set does not match the model.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(TrainerOptions options,
                                                        SchedulerClient* scheduler, PsClient* ps,
                                                        model::Mlp* model, const data::Dataset* train,
                                                        const data::Dataset* test);

  // Trains the whole job and sends the final report. Blocks. Errors name the failing call.
  absl::Status Run();

  // The weights after Run() (the job's final model).
  const std::vector<float>& weights() const { return weights_; }

 private:
  Trainer(TrainerOptions options, SchedulerClient* scheduler, PsClient* ps, model::Mlp* model,
          const data::Dataset* train, const data::Dataset* test, ShardLayout layout);

  absl::Status RunSync();
  absl::Status RunLeased();

  // Computes the gradient of the samples at permutation positions `range`, then pushes it to every
  // server and installs the weights they answer with.
  absl::Status Step(const std::vector<int64_t>& perm, data::Range range, int64_t step, int epoch);
  absl::Status PullWeights(int64_t step, int epoch);
  absl::Status InstallWeights();
  // Evaluates this rank's slice of the test set and reports it with the epoch's statistics.
  absl::Status EndEpoch(int epoch, bool last);
  absl::Status MaybeReport(int epoch, bool force);

  const TrainerOptions options_;
  const int num_workers_;
  SchedulerClient* const scheduler_;
  PsClient* const ps_;
  model::Mlp* const model_;
  const data::Dataset* const train_;
  const data::Dataset* const test_;
  const ShardLayout layout_;

  std::vector<float> weights_;
  std::vector<float> grad_;
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_y_;
  std::vector<PushRequest> push_;        // One per server, reused every step.
  std::vector<PullResponse> pulled_;     // One per server.
  uint64_t next_request_id_;

  int64_t global_step_ = 0;
  // Training statistics not yet reported.
  ProgressReport pending_;
  absl::Time last_report_ = absl::InfinitePast();
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_TRAINER_H_
