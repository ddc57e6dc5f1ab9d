// Training statistics of a job: what workers reported, per epoch and per worker, and the run
// summary written at the end.
//
// An epoch is complete when every worker has reported its evaluation for it (a worker reports an
// eval with samples = 0 when the job skips that epoch's evaluation). An epoch's seconds run from
// the previous epoch's completion, or from Start() for the first. The job is finished once every
// worker has sent a report with done = true.
//
// Reports carry no request id, so a retried report counts its training statistics twice; a
// repeated eval for the same (epoch, worker) replaces the earlier one.
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_PROGRESS_H_
#define PSTRAIN_SCHEDULER_PROGRESS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "proto/scheduler.pb.h"

namespace pstrain {
namespace scheduler {

class Progress {
 public:
  struct Options {
    // The job, completed by ApplyJobDefaults; copied into the summary.
    JobSpec job;
    int64_t total_steps = 0;
    // When the scheduler started; wall_seconds counts from here.
    absl::Time created = absl::UnixEpoch();
  };

  explicit Progress(Options options);

  // Training starts (every role registered): epoch 0's seconds and samples/s count from `now`.
  // Later calls are ignored. A report before Start() starts the clock itself.
  void Start(absl::Time now);

  // Adds one report received at `now`. INVALID_ARGUMENT, with nothing recorded, when the worker
  // rank or the epoch is out of range or a count is negative.
  absl::Status Add(const ProgressReport& report, absl::Time now);

  // True once every worker has reported done.
  bool finished() const { return workers_done_ == job().num_workers(); }

  // epoch, epochs, step, total_steps, recent_loss, samples_per_second, eta_seconds and
  // epochs_done (complete epochs; test_loss and test_accuracy are NaN when the epoch was not
  // evaluated). State, failure and registration counts are the caller's to fill.
  JobStatus Status(absl::Time now) const;

  // The run summary as JSON text (see the .cc for the layout). `failure` is empty unless the job
  // failed. Times are taken up to the finish, or `now` for a job that did not finish.
  std::string SummaryJson(JobState state, absl::string_view failure, absl::Time now) const;

  // Test accuracy and loss of the last evaluated complete epoch, if any.
  std::optional<double> final_test_accuracy() const;
  std::optional<double> final_test_loss() const;
  // Training samples per second of the whole run up to the finish (or `now`).
  double samples_per_second(absl::Time now) const;

 private:
  struct Epoch {
    double train_loss_sum = 0;
    int64_t train_samples = 0;
    // Indexed by worker rank; set when that worker's eval arrived.
    std::vector<std::optional<EvalStats>> evals;
    int evals_received = 0;
    bool complete = false;
    double seconds = 0;
  };

  const JobSpec& job() const { return options_.job; }
  // The summary line of one epoch (complete or not).
  EpochSummary Summarize(int epoch, const Epoch& data) const;
  // When the numbers stop counting: the finish, or `now`.
  absl::Time End(absl::Time now) const;
  int64_t Step() const;
  int64_t TotalTrainSamples() const;

  const Options options_;
  std::optional<absl::Time> start_;
  absl::Time last_epoch_end_;
  std::optional<absl::Time> finished_at_;
  std::map<int, Epoch> epochs_;
  std::vector<int64_t> worker_samples_;
  std::vector<bool> worker_done_;
  int workers_done_ = 0;
  int max_epoch_ = 0;
  int64_t max_step_ = 0;     // SYNC: the largest global step reported.
  int64_t batches_ = 0;      // ASYNC/SSP: batches trained by all workers.
  // (loss_sum, samples) of the last few reports, for recent_loss.
  std::deque<std::pair<double, int64_t>> recent_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_PROGRESS_H_
