#include "scheduler/lease_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {

LeasePool::LeasePool(Options options) : options_(options) {
  CHECK_GE(options_.train_samples, 0);
  CHECK_GE(options_.batch_size, 1);
  CHECK_GE(options_.lease_batches, 1);
  CHECK_GE(options_.epochs, 1);
  CHECK_GE(options_.max_batches, 0);
}

bool LeasePool::Exhausted() const {
  if (options_.max_batches > 0 && batches_leased_ >= options_.max_batches) return true;
  return next_position_ >= options_.train_samples;
}

absl::StatusOr<Lease> LeasePool::Next(int worker_rank, int epoch) {
  if (epoch < 0 || epoch >= options_.epochs) {
    return absl::OutOfRangeError(absl::StrCat("lease for worker ", worker_rank, ": epoch ", epoch,
                                              " is outside the job's epochs [0, ", options_.epochs,
                                              ")"));
  }
  Lease lease;
  lease.worker_rank = worker_rank;
  lease.epoch = epoch;
  if (epoch < epoch_) {
    lease.epoch_done = true;
    return lease;
  }
  if (epoch > epoch_) {
    if (epoch > epoch_ + 1 || !Exhausted()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lease for worker ", worker_rank, " in epoch ", epoch, ": epoch ", epoch_,
          " is still being handed out (", options_.train_samples - next_position_,
          " positions left); expected a request for epoch ", epoch_));
    }
    epoch_ = epoch;
    next_position_ = 0;
  }
  if (Exhausted()) {
    lease.epoch_done = true;
    return lease;
  }
  int64_t batches = options_.lease_batches;
  if (options_.max_batches > 0) batches = std::min(batches, options_.max_batches - batches_leased_);
  lease.begin = next_position_;
  lease.end = std::min(options_.train_samples, next_position_ + batches * options_.batch_size);
  lease.id = static_cast<int64_t>(leases_.size()) + 1;
  next_position_ = lease.end;
  batches_leased_ += (lease.end - lease.begin + options_.batch_size - 1) / options_.batch_size;
  leases_.push_back(lease);
  return lease;
}

}  // namespace scheduler
}  // namespace pstrain
