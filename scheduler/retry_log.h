// Idempotent retries of the worker calls that change the scheduler's state. A worker numbers its
// progress reports (ProgressReport.report_seq) and lease requests (LeaseRequest.request_seq); when
// an answer is lost (the scheduler restarted, the connection broke) the worker sends the same call
// again. This log remembers, by worker rank, the number of the last progress report applied and of
// the last lease request answered, with that answer, so that a retry is answered as the first call
// was and counts nothing twice. Number 0 means "not numbered": such a call is never a retry.
//
// Part of the scheduler's saved state (Save, Restore): a restarted scheduler answers the retries
// of calls its predecessor answered.
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_RETRY_LOG_H_
#define PSTRAIN_SCHEDULER_RETRY_LOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "absl/status/statusor.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

class RetryLog {
 public:
  // Whether worker `rank`'s progress report number `seq` was applied already (seq > 0 and not
  // above the last one applied).
  bool ProgressApplied(int rank, int64_t seq) const;
  // Worker `rank`'s report number `seq` was applied (nothing is kept for seq 0).
  void RecordProgress(int rank, int64_t seq);

  // What a numbered lease request of a live worker is: nullopt for a new request (above the last
  // one answered); the last answer again for a repeat of the last request; ABORTED for an older
  // number (a stale retry); INVALID_ARGUMENT for the last number with another epoch or kind.
  absl::StatusOr<std::optional<LeaseResponse>> LeaseRetry(const LeaseRequest& request) const;
  // `request` (numbered) was answered with `answer`.
  void RecordLease(const LeaseRequest& request, const LeaseResponse& answer);

  // Drops the ranks `forgotten` says the membership no longer remembers.
  void Forget(const std::function<bool(int rank)>& forgotten);

  void Save(SchedulerState* state) const;
  // Replaces the log with the state's.
  void Restore(const SchedulerState& state);

 private:
  struct Calls {
    int64_t progress_seq = 0;
    int64_t lease_seq = 0;
    LeaseRequest lease_request;
    LeaseResponse lease_answer;
  };
  std::map<int, Calls> by_rank_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_RETRY_LOG_H_
