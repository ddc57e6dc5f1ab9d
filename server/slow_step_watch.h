// Notices a SYNC step that waits much longer than usual for some workers, so the scheduler can say
// which ranks hold the job up (a stopped or overloaded worker, a slow link).
//
// A step is slow once it has waited, since its first push, longer than
// max(kFloor, kFactor x the store's typical wait). Each (step, missing workers) pair is reported
// once: a step that keeps waiting for the same workers is not reported again, but one whose
// missing set changes (one of two stragglers arrived) is.
//
// Thread safety: not thread-safe; the server's membership thread owns it.
#ifndef PSTRAIN_SERVER_SLOW_STEP_WATCH_H_
#define PSTRAIN_SERVER_SLOW_STEP_WATCH_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "proto/scheduler.pb.h"
#include "server/parameter_store.h"

namespace pstrain::server {

class SlowStepWatch {
 public:
  // Below this a wait is never slow: heartbeats, retries and the first steps' warm-up take this
  // long without anything being wrong.
  static constexpr absl::Duration kFloor = absl::Seconds(1);
  static constexpr int kFactor = 10;

  explicit SlowStepWatch(int server_rank) : server_rank_(server_rank) {}

  // The report to send for `pending` (ParameterStore::Pending), or nullopt when the step is not
  // slow, nothing is pending, or this (step, missing) was reported already.
  std::optional<SlowStepReport> Check(const std::optional<ParameterStore::PendingStep>& pending);

 private:
  const int server_rank_;
  int64_t reported_step_ = -1;
  std::vector<int> reported_missing_;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SLOW_STEP_WATCH_H_
