// Text for the launcher's progress display, built from the scheduler's JobStatus.
//
// Pure functions of their arguments (no clock, no terminal), so the exact strings are testable.
#ifndef PSTRAIN_LAUNCH_PROGRESS_H_
#define PSTRAIN_LAUNCH_PROGRESS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "proto/scheduler.pb.h"

namespace pstrain {
namespace launch {

// A duration rounded to whole seconds: "0s", "42s", "1m23s", "2h05m07s". Negative or non-finite
// values (an unknown ETA) give "--".
std::string FormatDuration(double seconds);

// A rate with an SI suffix and one decimal from a thousand up: "987", "12.3k", "4.6M".
// Negative or non-finite values give "--".
std::string FormatRate(double per_second);

// The one-line progress summary, e.g.
//   "epoch 3/10  step 1234/4690  loss 0.4321  12.3k samples/s  ETA 1m23s"
// Epochs are shown 1-based. Before every role has registered it reads
//   "waiting for roles: servers 1/2  workers 0/2"
// (the expected counts are given by the caller, who knows the job). Once the job ended it reads
// "job finished" or "job failed: <failure>".
std::string FormatProgressLine(const JobStatus& status, int num_servers, int num_workers);

// The line printed once per completed epoch, e.g.
//   "epoch 3/10 done: train_loss 0.3121  test_loss 0.3344  test_acc 0.8812  9.7 s"
// (with "  test_auc 0.7893" before the seconds when the epoch has a test AUC: CTR models),
// followed, when workers reported step times, by their per-step means over the epoch's steps of
// all workers (common/step_times.h), e.g.
//   "  step 5.0 ms = compute 3.1 + push 0.2 + wait 1.4 + pull 0.3 (0.9 overlapped)"
// `epochs` is the job's number of epochs; the summary's epoch is 0-based and shown 1-based.
std::string FormatEpochLine(const EpochSummary& epoch, int epochs);

// The result of a finished job, e.g.
//   "final test_acc 0.8812  12.3k samples/s  wall 1m23s  summary /tmp/pstrain-x/summary.json"
// The accuracy is the last completed epoch's ("n/a" if `status` has none), followed by
// "  test_auc 0.7893" when that epoch has a test AUC; samples/s is the total over completed
// epochs divided by their time (falling back to the status's current rate, then to "--").
// An empty `summary_path` leaves the summary part out.
std::string FormatFinalResult(const JobStatus& status, double wall_seconds, absl::string_view summary_path);

}  // namespace launch
}  // namespace pstrain

#endif  // PSTRAIN_LAUNCH_PROGRESS_H_
