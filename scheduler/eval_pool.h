// Evaluation leases: every test sample is evaluated exactly once per evaluated epoch, even when
// workers die mid-evaluation.
//
// The first request for epoch e opens its pool: [0, test_samples) is cut into leases of
// max(1, ceil(test_samples / (4 * num_workers))) samples (num_workers: the job's), the last one
// shorter. Each lease is then
//
//   free --(Next: handed to a worker)--> out --(Record: results arrive)--> reported
//     ^                                   |
//     +--(Release: its holder died/left)--+
//
// Next hands out the free lease with the lowest start; with none free it answers `wait` while some
// are out, and `epoch_done` once all are reported. Results count once per lease id, and only
// from the worker the lease is out with; later results for a reported lease (a retried report)
// are ignored. An epoch's results are the sums over its leases, and its test AUC
// the merge of their score histograms (EvalScores), when they carry them.
//
// Lease ids are 1, 2, ... over the whole job, in the order pools were cut.
//
// Not thread-safe: the Progress that owns it is guarded by the Scheduler's mutex.
#ifndef PSTRAIN_SCHEDULER_EVAL_POOL_H_
#define PSTRAIN_SCHEDULER_EVAL_POOL_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"
#include "scheduler/eval_scores.h"

namespace pstrain {
namespace scheduler {

struct EvalLease {
  // No lease now; ask again shortly (some are out and may come back).
  bool wait = false;
  // Every lease of the epoch is reported; the other fields are 0.
  bool epoch_done = false;
  int64_t id = 0;
  int epoch = 0;
  // Test sample indices [begin, end).
  int64_t begin = 0;
  int64_t end = 0;
};

class EvalPool {
 public:
  struct Options {
    int64_t test_samples = 0;
    // The job's number of workers; sets the lease size.
    int num_workers = 1;
    int epochs = 1;
  };

  // REQUIRES: test_samples >= 0, num_workers >= 1, epochs >= 1 (the Scheduler validates first).
  explicit EvalPool(Options options);

  int64_t lease_size() const { return lease_size_; }

  // The next lease of `epoch` for `worker_rank` (opening the epoch's pool on its first call),
  // handed out at `now`. OUT_OF_RANGE when epoch is not in [0, epochs).
  absl::StatusOr<EvalLease> Next(int worker_rank, int epoch, absl::Time now = absl::InfinitePast());

  // Checks the results in `report.evals` without recording anything: INVALID_ARGUMENT for an
  // unknown lease id, a sample count other than the lease's, correct outside [0, samples], a loss
  // sum that is negative, NaN or infinite, or
  // scores that are malformed or not one per sample (EvalScores::Check); PERMISSION_DENIED for a
  // lease that is not out with report.worker_rank (free, or out with another worker).
  absl::Status Check(const ProgressReport& report) const;

  // Records `report.evals` (REQUIRES: Check was OK), arrived at `now`; results for an already
  // reported lease are ignored. Returns the epochs that got new results, ascending, without
  // repeats.
  std::vector<int> Record(const ProgressReport& report, absl::Time now = absl::InfinitePast());

  // A lease out with a worker, and since when (InfinitePast: before this process restored it).
  struct OutLease {
    int64_t id = 0;
    int holder = -1;
    absl::Time since;
  };
  std::vector<OutLease> OutLeases() const;
  // The longest a lease took from hand-out to result, over the leases handed out and reported by
  // this process; zero before one was.
  absl::Duration longest_evaluation() const { return longest_; }

  // The leases `worker_rank` holds unreported become free again. Returns how many.
  int Release(int worker_rank);

  // True once the epoch's pool was opened.
  bool opened(int epoch) const { return epochs_.count(epoch) > 0; }
  // True when the epoch's pool is open and every lease of it is reported.
  bool complete(int epoch) const;
  // True when some opened pool is not complete.
  bool any_incomplete() const;
  // Evaluation leases handed out and not reported yet.
  int64_t num_out() const;

  struct Totals {
    double loss_sum = 0;
    int64_t correct = 0;
    int64_t samples = 0;
  };
  // Sums over the reported leases of `epoch`.
  Totals totals(int epoch) const;
  // The test AUC of `epoch` (its leases' scores); null when the epoch's pool is not open.
  const EvalScores* scores(int epoch) const;

  // The pool as a proto, and back (scheduler/snapshot.cc). Restore replaces the pool's state;
  // INVALID_ARGUMENT, changing nothing, when an epoch's slot range is outside the slots or its
  // scores do not restore (EvalScores::Restore).
  EvalPoolState ToProto() const;
  absl::Status Restore(const EvalPoolState& state);

 private:
  enum class State { kFree, kOut, kReported };
  struct Slot {
    int epoch = 0;
    int64_t begin = 0;
    int64_t end = 0;
    State state = State::kFree;
    int holder = -1;
    // When it was handed out last; not persisted.
    absl::Time handed = absl::InfinitePast();
    // Without its scores, which are merged into the epoch's once.
    EvalStats result;
  };
  struct EpochPool {
    // Its leases are slots_[first, first + count).
    size_t first = 0;
    size_t count = 0;
    size_t reported = 0;
    EvalScores scores;
  };

  const Options options_;
  const int64_t lease_size_;
  // Indexed by lease id - 1.
  std::vector<Slot> slots_;
  std::map<int, EpochPool> epochs_;
  absl::Duration longest_ = absl::ZeroDuration();
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_EVAL_POOL_H_
