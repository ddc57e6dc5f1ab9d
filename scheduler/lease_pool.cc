#include "scheduler/lease_pool.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

bool LeasePool::EpochTrained(int epoch) const {
  if (epoch < epoch_) return true;
  if (epoch == epoch_) return EpochDone();
  return options_.max_batches > 0 && batches_leased_ >= options_.max_batches && incomplete_ == 0;
}

int64_t LeasePool::BatchesHandedTo(int worker_rank) const {
  // A remainder handed on counts in full for each holder: a bound, not an exact count.
  int64_t batches = 0;
  for (const LeaseRecord& lease : leases_) {
    for (int holder : lease.holders) {
      if (holder == worker_rank) batches += lease.batches;
    }
  }
  return batches;
}

std::vector<int> LeasePool::EpochEndWaitsFor() const {
  if (!Exhausted() || incomplete_ == 0) return {};
  std::set<int> holders;
  for (size_t i = epoch_first_; i < leases_.size(); ++i) {
    if (!leases_[i].complete() && leases_[i].holder >= 0) holders.insert(leases_[i].holder);
  }
  return std::vector<int>(holders.begin(), holders.end());
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
    if (epoch > epoch_ + 1 || !EpochDone()) {
      const int64_t uncut = Exhausted() ? 0 : options_.train_samples - next_position_;
      return absl::FailedPreconditionError(absl::StrCat(
          "lease for worker ", worker_rank, " in epoch ", epoch, ": epoch ", epoch_,
          " is not done (", uncut, " positions not leased yet, ", incomplete_,
          " leases incomplete); expected a request for epoch ", epoch_));
    }
    epoch_ = epoch;
    next_position_ = 0;
    epoch_first_ = leases_.size();
  }
  if (!remainders_.empty()) {
    LeaseRecord& record = leases_[static_cast<size_t>(*remainders_.begin() - 1)];
    remainders_.erase(remainders_.begin());
    record.holder = worker_rank;
    record.holders.push_back(worker_rank);
    lease.id = record.id;
    lease.begin = record.begin;
    lease.end = record.end;
    lease.first_batch = record.batches_done;
    return lease;
  }
  if (Exhausted()) {
    lease.wait = incomplete_ > 0;
    lease.epoch_done = !lease.wait;
    return lease;
  }
  int64_t batches = options_.lease_batches;
  if (options_.max_batches > 0) batches = std::min(batches, options_.max_batches - batches_leased_);
  LeaseRecord record;
  record.id = static_cast<int64_t>(leases_.size()) + 1;
  record.epoch = epoch;
  record.begin = next_position_;
  record.end = std::min(options_.train_samples, next_position_ + batches * options_.batch_size);
  record.batches = (record.end - record.begin + options_.batch_size - 1) / options_.batch_size;
  record.holder = worker_rank;
  record.holders.push_back(worker_rank);
  next_position_ = record.end;
  batches_leased_ += record.batches;
  ++incomplete_;
  leases_.push_back(record);
  lease.id = record.id;
  lease.begin = record.begin;
  lease.end = record.end;
  return lease;
}

absl::Status LeasePool::Check(const ProgressReport& report) const {
  for (const LeaseProgress& progress : report.leases()) {
    const std::string where = absl::StrCat("progress report from worker ", report.worker_rank(),
                                           " for training lease ", progress.lease_id());
    if (progress.lease_id() < 1 || progress.lease_id() > num_leases()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown lease id, expected one of the ",
                                                     num_leases(), " leases handed out (1..",
                                                     num_leases(), ")"));
    }
    const LeaseRecord& record = lease(progress.lease_id());
    if (record.epoch != report.epoch()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the lease is of epoch ", record.epoch,
                                                     ", the report of epoch ", report.epoch()));
    }
    if (progress.batches_done() < 0 || progress.batches_done() > record.batches) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", progress.batches_done(), " batches done, expected 0..", record.batches,
          " (positions [", record.begin, ", ", record.end, ") of epoch ", record.epoch, ")"));
    }
    if (std::find(record.holders.begin(), record.holders.end(), report.worker_rank()) ==
        record.holders.end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the lease was never handed to worker ",
                                                     report.worker_rank(), " (holders: ",
                                                     absl::StrJoin(record.holders, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<LeaseRecord> LeasePool::Record(const ProgressReport& report) {
  std::vector<LeaseRecord> completed;
  for (const LeaseProgress& progress : report.leases()) {
    LeaseRecord& record = leases_[static_cast<size_t>(progress.lease_id() - 1)];
    if (record.complete() || progress.batches_done() <= record.batches_done) continue;
    record.batches_done = progress.batches_done();
    if (!record.complete()) continue;
    // An epoch only ends when all its leases are complete, so this one is of the current epoch.
    DCHECK_EQ(record.epoch, epoch_);
    --incomplete_;
    remainders_.erase(record.id);  // A late report of its dead holder may complete a remainder.
    completed.push_back(record);
  }
  return completed;
}

int LeasePool::Release(int worker_rank) {
  int released = 0;
  for (size_t i = epoch_first_; i < leases_.size(); ++i) {
    LeaseRecord& record = leases_[i];
    if (record.holder != worker_rank || record.complete()) continue;
    record.holder = -1;
    remainders_.insert(record.id);
    ++released;
  }
  return released;
}

}  // namespace scheduler
}  // namespace pstrain
