// Training statistics of a job: what workers reported, per epoch and per worker, the evaluation
// leases (EvalPool) and the run summary written at the end.
//
// An epoch is complete when every evaluation lease of it is reported. An epoch nobody evaluates
// (eval_last_epoch_only) has no leases; it is complete, without test numbers, once a report or an
// evaluation lease request for a later epoch arrives, or the job finishes. An epoch's seconds run
// from the previous epoch's completion, or from Start() for the first. The job is finished once
// every live worker has sent a report with done = true and no evaluation is outstanding
// (TryFinish).
//
// Training loss and the per-worker sample counts come from the reports. Reports carry no request
// id, so a retried report counts its training statistics twice. An epoch's sample count does not
// depend on them: SYNC counts the global batches of the distinct steps reported as applied
// (Options::global_batch), ASYNC/SSP the sizes of the epoch's complete training leases
// (CountLease), so work a dead worker did but never reported still counts, and counts once.
// Evaluation results count once per lease.
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_PROGRESS_H_
#define PSTRAIN_SCHEDULER_PROGRESS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "data/score_histogram.h"
#include "proto/job.pb.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"
#include "scheduler/eval_pool.h"
#include "scheduler/membership.h"
#include "scheduler/status_json.h"
#include "scheduler/timeline.h"

namespace pstrain {
namespace scheduler {

class Progress {
 public:
  struct Options {
    // The job, completed by ApplyJobDefaults; copied into the summary.
    JobSpec job;
    int64_t total_steps = 0;
    // When the scheduler started; wall_seconds and membership event times count from here.
    absl::Time created = absl::UnixEpoch();
    // Size of the test set, cut into evaluation leases.
    int64_t test_samples = 0;
    // SYNC: size of the training set and of a global batch. An epoch's sample count is then the
    // sum of the global batches of the distinct steps workers report as done, so the steps a dead
    // worker did but never reported are still counted (every live worker completes every step).
    int64_t train_samples = 0;
    int64_t global_batch = 0;
  };

  explicit Progress(Options options);

  // A data stream's newly ready records (Options.train_samples, total_steps; neither shrinks).
  void GrowData(int64_t train_samples, int64_t total_steps);

  // Training starts (every role registered): epoch 0's seconds and samples/s count from `now`.
  // Later calls are ignored. A report before Start() starts the clock itself.
  void Start(absl::Time now);

  // Adds one report received at `now`: its training statistics, its evaluation results and its
  // done flag. INVALID_ARGUMENT, with nothing recorded, when the worker rank is negative, the epoch
  // is out of range, a count is negative or an evaluation result does not fit its lease
  // (EvalPool::Check). The caller checks that the rank is registered and drops `done` from a
  // worker that is no longer live.
  //
  // What the scheduler handed out bounds what a report may claim (INVALID_ARGUMENT otherwise):
  // train samples <= train steps x global_batch (SYNC) or x batch_size (ASYNC/SSP); SYNC: a
  // worker's samples over the job <= total_steps x global_batch x (1 + AllowRedo calls); ASYNC/SSP:
  // a worker's batches over the job <= `batch_budget`, the batches of the leases handed to it
  // (LeasePool::BatchesHandedTo; < 0: not checked).
  absl::Status Add(const ProgressReport& report, absl::Time now, int64_t batch_budget = -1);

  // SYNC: the job goes back to an earlier step (a server recovery's restore_step), so workers redo
  // steps: each call allows every worker total_steps more steps' samples.
  void AllowRedo() { ++redo_rounds_; }

  // The step of worker `rank`'s latest report; 0 when it sent none (or only at step 0).
  int64_t worker_step(int rank) const {
    auto it = workers_.find(rank);
    return it == workers_.end() ? 0 : it->second.step;
  }
  // When worker `rank`'s reported step last changed (InfinitePast: not since this process started).
  absl::Time worker_step_changed(int rank) const {
    auto it = workers_.find(rank);
    return it == workers_.end() ? absl::InfinitePast() : it->second.step_changed;
  }

  // The next evaluation lease of `epoch` for `worker_rank` (EvalPool::Next); epoch_done for an epoch
  // already complete without evaluation. OUT_OF_RANGE when epoch is not in [0, epochs).
  absl::StatusOr<EvalLease> LeaseEval(int worker_rank, int epoch, absl::Time now);

  // ASYNC/SSP: training lease `lease_id` of `epoch`, covering `samples` positions, is complete; its
  // samples count towards the epoch. Later calls for the same lease id are ignored.
  void CountLease(int64_t lease_id, int epoch, int64_t samples);

  // Worker `rank` died or left: its unreported evaluation leases go back to the pool and its done
  // flag is forgotten (a worker that takes the rank later starts afresh). Returns the number of
  // leases returned.
  int WorkerGone(int rank);

  // Finishes the job at `now` if `live_workers` is not empty, each of them has reported done and
  // no evaluation is outstanding; epochs still open without evaluation complete now. True once
  // finished (also on later calls).
  bool TryFinish(const std::vector<int>& live_workers, absl::Time now);
  // TryFinish's condition, without finishing: `live_workers` is not empty, each has reported done
  // and no evaluation is outstanding.
  bool AllDone(const std::vector<int>& live_workers) const;
  bool finished() const { return finished_at_.has_value(); }

  // epoch, epochs, step, total_steps, recent_loss, samples_per_second, eta_seconds and
  // epochs_done (complete epochs; test_loss and test_accuracy are NaN when the epoch was not
  // evaluated; test_auc and its bound are set when its workers reported scores, see EvalScores).
  // State, failure and registration counts are the caller's to fill.
  JobStatus Status(absl::Time now) const;

  // The run summary as JSON text (see the .cc for the layout). `failure` is empty unless the job
  // failed. Times are taken up to the finish, or `now` for a job that did not finish.
  // `events` and `live_workers` come from the Membership; `more` is inserted as it is after
  // "live_workers": further members, each a line `  "name": value,` (the caller's own records).
  std::string SummaryJson(JobState state, absl::string_view failure, absl::Time now,
                          const std::vector<MembershipEvent>& events = {}, const std::vector<int>& live_workers = {},
                          absl::string_view more = "") const;

  // The progress part of the dashboard's status: epoch, epochs, step, total_steps,
  // samples_per_second, eta_seconds, recent_loss, epochs_done and workers (every worker that ever
  // reported or was configured, with its traffic and staleness sums). The rest is the caller's.
  void FillStatus(absl::Time now, DashboardStatus* out) const;
  // A worker's samples/s in the dashboard count the samples it reported this long before `now`.
  static constexpr absl::Duration kRecentWindow = absl::Seconds(10);

  // The timeline of reports (Timeline::Since): one point per report that Add accepted and that
  // carries training (steps or samples); evaluation-only and bare done reports make none.
  std::vector<TimelinePoint> TimelineSince(int64_t since, size_t max_points, int64_t* next) const {
    return timeline_.Since(since, max_points, next);
  }

  // Evaluation leases handed out and not reported yet.
  int64_t eval_leases_out() const { return eval_.num_out(); }
  // Whether `epoch`'s evaluation pool was opened (its first lease went out).
  bool eval_opened(int epoch) const { return eval_.opened(epoch); }
  // The evaluation pool's leases out (EvalPool::OutLeases) and its longest evaluation.
  std::vector<EvalPool::OutLease> eval_leases_held() const { return eval_.OutLeases(); }
  absl::Duration longest_evaluation() const { return eval_.longest_evaluation(); }

  // Test accuracy and loss of the last evaluated complete epoch, if any.
  std::optional<double> final_test_accuracy() const;
  std::optional<double> final_test_loss() const;
  // Jobs whose workers report scores (EvalStats.scores): the last complete epoch with a test AUC,
  // its bound (NaN: no AUC, see EvalScores) and its mean test loss, which is the log loss when the
  // model's loss is binary cross-entropy. Unset for other jobs.
  struct FinalAuc {
    double auc = 0;
    double error_bound = 0;
    double logloss = 0;
  };
  std::optional<FinalAuc> final_test_auc() const;
  // Training samples per second of the whole run up to the finish (or `now`).
  double samples_per_second(absl::Time now) const;

  // Everything reported so far as a proto, and back (scheduler/snapshot.cc). Restore replaces the
  // statistics and the evaluation pool; INVALID_ARGUMENT, changing nothing, for a state that does
  // not fit the job (an epoch outside it, a negative rank).
  ProgressState ToProto() const;
  absl::Status Restore(const ProgressState& state);

  // Folds the statistics of every worker for which `forgotten(rank)` is true into one sum (the
  // summary's "forgotten_workers"; totals stay the same) and drops them: the membership forgot
  // them (Membership::kMaxGoneWorkers), and the summary and /api/status must stay bounded.
  void ForgetWorkers(const std::function<bool(int rank)>& forgotten);

 private:
  struct Epoch {
    double train_loss_sum = 0;
    // Samples in the workers' reports: the train loss is their mean.
    int64_t train_samples = 0;
    // SYNC: samples of the distinct applied steps (see Options::global_batch). ASYNC/SSP: samples of
    // the complete leases.
    int64_t applied_samples = 0;
    bool complete = false;
    double seconds = 0;
    // When it completed (meaningful once complete).
    absl::Time end;
    // Summed over the workers' reports for this epoch.
    StepTimes step_times;
    // Progressive validation (TrainStats.scores): the trained samples' predictions, each made
    // before the update it led to, merged from the reports. Held while the job runs, not in the
    // saved state (a restarted scheduler starts the epoch's anew: its train_auc then covers the
    // reports since). Null until a report brings scores, and again once the epoch is complete: its
    // AUC is then train_auc, so that at most the open epochs hold a histogram (1 MiB) each.
    std::shared_ptr<data::ScoreHistogram> train_scores;
    std::optional<double> train_auc;
  };
  struct Worker {
    int64_t samples = 0;
    // ASYNC/SSP: batches reported (train.steps summed); not persisted.
    int64_t batches = 0;
    bool done = false;
    // The step of its latest report, and the sums of its reports' traffic and staleness (the
    // staleness max is the maximum).
    int64_t step = 0;
    // When `step` last changed; not persisted.
    absl::Time step_changed = absl::InfinitePast();
    WorkerTraffic traffic;
    Staleness staleness;
    // (arrival, samples) of its reports in the last kRecentWindow; not persisted.
    std::deque<std::pair<absl::Time, int64_t>> recent;
  };

  const JobSpec& job() const { return options_.job; }
  bool counts_steps() const { return job().mode() == SYNC && options_.global_batch > 0; }
  // Whether an epoch's samples are applied_samples (steps or leases) rather than the reports' sum.
  bool counts_applied() const { return job().mode() != SYNC || counts_steps(); }
  // Add's bounds on what a report claims (see Add).
  absl::Status CheckClaims(const ProgressReport& report, int64_t batch_budget) const;
  // SYNC: counts the global steps [begin, end) not counted yet.
  void CountSteps(int64_t begin, int64_t end);
  // Marks `epoch` complete at `now`.
  void Complete(Epoch* epoch, absl::Time now);
  // The AUC of the epoch's training scores; NaN without them or with one label only.
  static double TrainAuc(const Epoch& epoch);
  // Completes `epoch` if its evaluation pool is open and fully reported.
  void UpdateCompletion(int epoch, absl::Time now);
  // Completes the epochs before `epoch` that nobody evaluates.
  void CloseUnevaluatedBefore(int epoch, absl::Time now);
  // The summary line of one epoch (complete or not).
  EpochSummary Summarize(int epoch, const Epoch& data) const;
  // When the numbers stop counting: the finish, or `now`.
  absl::Time End(absl::Time now) const;
  int64_t Step() const;
  int64_t TotalTrainSamples() const;
  // The step times of every epoch, summed.
  StepTimes TotalStepTimes() const;

  Options options_;  // constant but for GrowData
  std::optional<absl::Time> start_;
  absl::Time last_epoch_end_;
  std::optional<absl::Time> finished_at_;
  std::map<int, Epoch> epochs_;
  std::vector<bool> counted_steps_;   // SYNC: global steps whose samples are counted.
  std::vector<bool> counted_leases_;  // ASYNC/SSP: by lease id, leases whose samples are counted.
  EvalPool eval_;
  // By worker rank; ranks 0..num_workers-1 always, later ones once they report.
  std::map<int, Worker> workers_;
  // ForgetWorkers: how many were forgotten, and their statistics summed.
  int64_t forgotten_workers_ = 0;
  Worker forgotten_;
  int max_epoch_ = 0;
  int64_t max_step_ = 0;  // SYNC: the largest global step reported.
  int64_t batches_ = 0;   // ASYNC/SSP: batches trained by all workers.
  int redo_rounds_ = 0;   // SYNC: AllowRedo calls; not persisted.
  // (loss_sum, samples) of the last few reports, for recent_loss.
  std::deque<std::pair<double, int64_t>> recent_;
  // One point per accepted training report; not persisted.
  Timeline timeline_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_PROGRESS_H_
