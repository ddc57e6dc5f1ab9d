#include "server/async_step.h"

#include "absl/strings/str_cat.h"

namespace pstrain::server {

absl::StatusOr<AsyncStep::Verdict> AsyncStep::Push(const PushRequest& req) {
  Verdict verdict;
  const bool leased = req.lease_id() != 0;
  verdict.ended_epoch = leased && req.data_epoch() < data_epoch_;
  if (!verdict.ended_epoch && (ssp_ || req.data_epoch() > data_epoch_)) {
    absl::StatusOr<bool> entered = EnterEpoch("push", req.worker_rank(), req.data_epoch());
    if (!entered.ok()) return entered.status();
    verdict.new_epoch = *entered;
  }
  verdict.apply = !verdict.ended_epoch && (!leased || applied_.Add(req.lease_id(), req.lease_batch()));
  return verdict;
}

absl::StatusOr<bool> AsyncStep::EnterEpoch(absl::string_view what, int worker_rank, int32_t data_epoch) {
  if (data_epoch < data_epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(what, " from worker ", worker_rank, " for data epoch ",
                                                      data_epoch, ": server ", server_rank_,
                                                      " is already in data epoch ", data_epoch_));
  }
  if (data_epoch == data_epoch_) return false;
  data_epoch_ = data_epoch;
  applied_.Clear();
  return true;
}

AppliedLeases AsyncStep::AppliedFrom(int64_t first_lease_id, int max_leases) const {
  AppliedLeases out;
  if (applied_.num_leases() == 0) return out;
  out.set_data_epoch(data_epoch_);
  applied_.Report(first_lease_id, max_leases, &out);
  return out;
}

}  // namespace pstrain::server
