#include "scheduler/retry_log.h"

#include <iterator>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace scheduler {

bool RetryLog::ProgressApplied(int rank, int64_t seq) const {
  if (seq <= 0) return false;
  auto it = by_rank_.find(rank);
  return it != by_rank_.end() && seq <= it->second.progress_seq;
}

void RetryLog::RecordProgress(int rank, int64_t seq) {
  if (seq > 0) by_rank_[rank].progress_seq = seq;
}

absl::StatusOr<std::optional<LeaseResponse>> RetryLog::LeaseRetry(const LeaseRequest& request) const {
  const int rank = request.worker_rank();
  const int64_t seq = request.request_seq();
  auto it = by_rank_.find(rank);
  if (seq <= 0 || it == by_rank_.end()) return std::nullopt;
  const Calls& calls = it->second;
  if (seq < calls.lease_seq) {
    return absl::AbortedError(absl::StrCat("lease request ", seq, " from worker ", rank, ": older than its last one (",
                                           calls.lease_seq, "), a stale retry"));
  }
  if (seq > calls.lease_seq) return std::nullopt;
  // A retry whose answer was lost (e.g. the scheduler restarted): the same answer again, so no
  // lease goes out that the worker never learnt of.
  if (request.epoch() != calls.lease_request.epoch() || request.eval() != calls.lease_request.eval()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease request ", seq, " from worker ", rank, " (epoch ", request.epoch(), request.eval() ? ", eval" : "",
        "): the same sequence number as its last request, which was for epoch ", calls.lease_request.epoch(),
        calls.lease_request.eval() ? ", eval" : ""));
  }
  return calls.lease_answer;
}

void RetryLog::RecordLease(const LeaseRequest& request, const LeaseResponse& answer) {
  if (request.request_seq() <= 0) return;
  Calls& calls = by_rank_[request.worker_rank()];
  calls.lease_seq = request.request_seq();
  calls.lease_request = request;
  calls.lease_answer = answer;
}

void RetryLog::Forget(const std::function<bool(int rank)>& forgotten) {
  for (auto it = by_rank_.begin(); it != by_rank_.end();) {
    it = forgotten(it->first) ? by_rank_.erase(it) : std::next(it);
  }
}

void RetryLog::Save(SchedulerState* state) const {
  for (const auto& [rank, calls] : by_rank_) {
    WorkerCallsState* out = state->add_worker_calls();
    out->set_rank(rank);
    out->set_progress_seq(calls.progress_seq);
    out->set_lease_seq(calls.lease_seq);
    *out->mutable_lease_request() = calls.lease_request;
    *out->mutable_lease_answer() = calls.lease_answer;
  }
}

void RetryLog::Restore(const SchedulerState& state) {
  by_rank_.clear();
  for (const WorkerCallsState& calls : state.worker_calls()) {
    by_rank_[calls.rank()] =
        Calls{calls.progress_seq(), calls.lease_seq(), calls.lease_request(), calls.lease_answer()};
  }
}

}  // namespace scheduler
}  // namespace pstrain
