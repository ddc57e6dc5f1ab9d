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
  CHECK_GE(options_.num_servers, 1);
  report_from_.assign(static_cast<size_t>(options_.num_servers), 1);
  counts_.assign(static_cast<size_t>(options_.num_servers), true);
  reports_count_upto_.assign(static_cast<size_t>(options_.num_servers), 0);
}

int64_t LeasePool::Confirmed(const LeaseRecord& lease) const {
  int64_t confirmed = -1;
  for (size_t s = 0; s < counts_.size(); ++s) {
    if (!counts_[s]) continue;
    const int64_t applied =
        lease.id <= reports_count_upto_[s] ? std::max(lease.applied[s], lease.batches_done) : lease.applied[s];
    confirmed = confirmed < 0 ? applied : std::min(confirmed, applied);
  }
  return confirmed < 0 ? lease.batches_done : confirmed;
}

void LeasePool::MaybeComplete(LeaseRecord& lease, std::vector<LeaseRecord>* completed) {
  if (lease.done || Confirmed(lease) < lease.batches) return;
  // An epoch only ends when all its leases are complete, so this one is of the current epoch.
  DCHECK_EQ(lease.epoch, epoch_);
  lease.done = true;
  --incomplete_;
  remainders_.erase(lease.id);  // A late confirmation may complete a remainder.
  completed->push_back(lease);
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
  auto it = handed_.find(worker_rank);
  return it == handed_.end() ? 0 : it->second;
}

void LeasePool::CountHandedTo(int worker_rank, const LeaseRecord& lease) {
  // A remainder handed on counts in full for each holder: a bound, not an exact count.
  handed_[worker_rank] += lease.batches;
}

std::vector<int> LeasePool::EpochEndWaitsFor() const {
  if (!Exhausted() || incomplete_ == 0) return {};
  std::set<int> holders;
  for (size_t i = epoch_first_; i < leases_.size(); ++i) {
    if (!leases_[i].complete() && leases_[i].holder >= 0) holders.insert(leases_[i].holder);
  }
  return std::vector<int>(holders.begin(), holders.end());
}

int64_t LeasePool::ConfirmedHeldBy(int worker_rank) const {
  int64_t confirmed = 0;
  for (size_t i = epoch_first_; i < leases_.size(); ++i) {
    if (!leases_[i].done && leases_[i].holder == worker_rank) confirmed += Confirmed(leases_[i]);
  }
  return confirmed;
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
    CountHandedTo(worker_rank, record);
    lease.id = record.id;
    lease.begin = record.begin;
    lease.end = record.end;
    lease.first_batch = Confirmed(record);
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
  record.applied.assign(static_cast<size_t>(options_.num_servers), 0);
  next_position_ = record.end;
  batches_leased_ += record.batches;
  ++incomplete_;
  CountHandedTo(worker_rank, record);
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
    record.batches_done = std::max(record.batches_done, progress.batches_done());
    MaybeComplete(record, &completed);
  }
  return completed;
}

std::vector<LeaseRecord> LeasePool::Confirm(int server_rank, const AppliedLeases& applied, int* skipped) {
  std::vector<LeaseRecord> completed;
  int bad = 0;
  int n = std::min(applied.lease_ids_size(), applied.batches_size());
  bad += std::max(applied.lease_ids_size(), applied.batches_size()) - n;
  if (server_rank < 0 || server_rank >= options_.num_servers) {
    bad += n;
    n = 0;
  }
  for (int i = 0; i < n; ++i) {
    const int64_t id = applied.lease_ids(i);
    const int64_t batches = applied.batches(i);
    if (id < 1 || id > num_leases()) {
      ++bad;
      continue;
    }
    LeaseRecord& record = leases_[static_cast<size_t>(id - 1)];
    if (record.epoch != applied.data_epoch() || batches < 0 || batches > record.batches) {
      ++bad;
      continue;
    }
    int64_t& count = record.applied[static_cast<size_t>(server_rank)];
    count = std::max(count, batches);
    MaybeComplete(record, &completed);
  }
  if (skipped != nullptr) *skipped = bad;
  return completed;
}

int64_t LeasePool::ReportFrom(int server_rank) {
  if (server_rank < 0 || server_rank >= options_.num_servers) return 0;
  int64_t& from = report_from_[static_cast<size_t>(server_rank)];
  from = std::max(from, static_cast<int64_t>(epoch_first_) + 1);
  while (from <= num_leases() &&
         (lease(from).done || lease(from).applied[static_cast<size_t>(server_rank)] == lease(from).batches)) {
    ++from;
  }
  return from;
}

std::vector<LeaseRecord> LeasePool::SetServerCounts(int server_rank, bool counts) {
  std::vector<LeaseRecord> completed;
  if (server_rank < 0 || server_rank >= options_.num_servers || counts_[server_rank] == counts) return completed;
  counts_[server_rank] = counts;
  if (counts) reports_count_upto_[server_rank] = num_leases();
  for (size_t i = epoch_first_; i < leases_.size(); ++i) MaybeComplete(leases_[i], &completed);
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
