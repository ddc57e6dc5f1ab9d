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
  CHECK(!options_.stream || (options_.epochs == 1 && options_.max_batches == 0));
  train_samples_ = options_.train_samples;
  num_servers_ = options_.num_servers;
  report_from_.assign(static_cast<size_t>(num_servers_), 1);
  counts_.assign(static_cast<size_t>(num_servers_), true);
  reports_count_upto_.assign(static_cast<size_t>(num_servers_), 0);
}

void LeasePool::SetNumServers(int num_servers) {
  CHECK_GE(num_servers, 1);
  CHECK_EQ(incomplete_, 0) << "the server count changes only while no lease is incomplete";
  num_servers_ = num_servers;
  // Every lease kept is complete: a new rank has nothing of them to confirm.
  for (LeaseRecord& record : leases_) record.applied.resize(static_cast<size_t>(num_servers), record.batches);
  report_from_.resize(static_cast<size_t>(num_servers), num_leases() + 1);
  counts_.resize(static_cast<size_t>(num_servers), true);
  reports_count_upto_.resize(static_cast<size_t>(num_servers), 0);
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
  return next_position_ >= train_samples_;
}

void LeasePool::SetStream(int64_t records, bool ended) {
  if (!options_.stream) return;
  train_samples_ = std::max(train_samples_, records);
  stream_ended_ = ended;
}

const LeaseRecord* LeasePool::Find(int64_t id) const {
  if (id < first_id_ || id > num_leases()) return nullptr;
  return &leases_[static_cast<size_t>(id - first_id_)];
}

void LeasePool::DropSettled() {
  while (!leases_.empty()) {
    const LeaseRecord& front = leases_.front();
    if (!front.done || (front.batches_done < front.batches && front.holder >= 0)) return;
    leases_.pop_front();
    ++first_id_;
  }
}

int64_t LeasePool::SettledPosition() const {
  const int64_t first = EpochFirstKept();
  return first <= num_leases() ? lease(first).begin : next_position_;
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
  if (!Exhausted() || incomplete_ == 0 || (options_.stream && !stream_ended_)) return {};
  std::set<int> holders;
  for (int64_t id = EpochFirstKept(); id <= num_leases(); ++id) {
    const LeaseRecord& l = lease(id);
    if (!l.complete() && l.holder >= 0) holders.insert(l.holder);
  }
  return std::vector<int>(holders.begin(), holders.end());
}

int64_t LeasePool::ConfirmedHeldBy(int worker_rank) const {
  int64_t confirmed = 0;
  for (int64_t id = EpochFirstKept(); id <= num_leases(); ++id) {
    const LeaseRecord& l = lease(id);
    if (!l.done && l.holder == worker_rank) confirmed += Confirmed(l);
  }
  return confirmed;
}

absl::StatusOr<Lease> LeasePool::Next(int worker_rank, int epoch) {
  if (epoch < 0 || epoch >= options_.epochs) {
    return absl::OutOfRangeError(absl::StrCat("lease for worker ", worker_rank, ": epoch ", epoch,
                                              " is outside the job's epochs [0, ", options_.epochs, ")"));
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
      const int64_t uncut = Exhausted() ? 0 : train_samples_ - next_position_;
      return absl::FailedPreconditionError(absl::StrCat(
          "lease for worker ", worker_rank, " in epoch ", epoch, ": epoch ", epoch_, " is not done (", uncut,
          " positions not leased yet, ", incomplete_, " leases incomplete); expected a request for epoch ", epoch_));
    }
    epoch_ = epoch;
    next_position_ = 0;
    epoch_first_id_ = num_leases() + 1;
  }
  if (!remainders_.empty()) {
    LeaseRecord& record = *FindKept(*remainders_.begin());  // remainders are incomplete, so kept
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
    lease.epoch_done = EpochDone();
    lease.wait = !lease.epoch_done;
    return lease;
  }
  if (hold_fresh_) {
    lease.wait = true;
    return lease;
  }
  int64_t batches = options_.lease_batches;
  if (options_.max_batches > 0) batches = std::min(batches, options_.max_batches - batches_leased_);
  LeaseRecord record;
  record.id = num_leases() + 1;
  record.epoch = epoch;
  record.begin = next_position_;
  record.end = std::min(train_samples_, next_position_ + batches * options_.batch_size);
  record.batches = (record.end - record.begin + options_.batch_size - 1) / options_.batch_size;
  record.holder = worker_rank;
  record.holders.push_back(worker_rank);
  record.applied.assign(static_cast<size_t>(num_servers_), 0);
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
    const std::string where =
        absl::StrCat("progress report from worker ", report.worker_rank(), " for training lease ", progress.lease_id());
    if (progress.lease_id() < 1 || progress.lease_id() > num_leases()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown lease id, expected one of the ", num_leases(),
                                                     " leases handed out (1..", num_leases(), ")"));
    }
    if (progress.lease_id() < first_id_) continue;  // settled and dropped: nothing to change
    const LeaseRecord& record = lease(progress.lease_id());
    if (record.epoch != report.epoch()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the lease is of epoch ", record.epoch, ", the report of epoch ", report.epoch()));
    }
    if (progress.batches_done() < 0 || progress.batches_done() > record.batches) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", progress.batches_done(),
                                                     " batches done, expected 0..", record.batches, " (positions [",
                                                     record.begin, ", ", record.end, ") of epoch ", record.epoch, ")"));
    }
    if (std::find(record.holders.begin(), record.holders.end(), report.worker_rank()) == record.holders.end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the lease was never handed to worker ",
                                                     report.worker_rank(),
                                                     " (holders: ", absl::StrJoin(record.holders, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<LeaseRecord> LeasePool::Record(const ProgressReport& report) {
  std::vector<LeaseRecord> completed;
  for (const LeaseProgress& progress : report.leases()) {
    LeaseRecord* record = FindKept(progress.lease_id());
    if (record == nullptr) continue;  // settled and dropped
    record->batches_done = std::max(record->batches_done, progress.batches_done());
    MaybeComplete(*record, &completed);
  }
  DropSettled();
  return completed;
}

std::vector<LeaseRecord> LeasePool::Confirm(int server_rank, const AppliedLeases& applied, int* skipped) {
  std::vector<LeaseRecord> completed;
  int bad = 0;
  int n = std::min(applied.lease_ids_size(), applied.batches_size());
  bad += std::max(applied.lease_ids_size(), applied.batches_size()) - n;
  if (server_rank < 0 || server_rank >= num_servers_) {
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
    if (id < first_id_) continue;  // settled and dropped: complete on every server that counts
    LeaseRecord& record = *FindKept(id);
    if (record.epoch != applied.data_epoch() || batches < 0 || batches > record.batches) {
      ++bad;
      continue;
    }
    int64_t& count = record.applied[static_cast<size_t>(server_rank)];
    count = std::max(count, batches);
    MaybeComplete(record, &completed);
  }
  if (skipped != nullptr) *skipped = bad;
  DropSettled();
  return completed;
}

int64_t LeasePool::ReportFrom(int server_rank) {
  if (server_rank < 0 || server_rank >= num_servers_) return 0;
  int64_t& from = report_from_[static_cast<size_t>(server_rank)];
  from = std::max(from, EpochFirstKept());
  while (from <= num_leases() &&
         (lease(from).done || lease(from).applied[static_cast<size_t>(server_rank)] == lease(from).batches)) {
    ++from;
  }
  return from;
}

std::vector<LeaseRecord> LeasePool::SetServerCounts(int server_rank, bool counts) {
  std::vector<LeaseRecord> completed;
  if (server_rank < 0 || server_rank >= num_servers_ || counts_[server_rank] == counts) return completed;
  counts_[server_rank] = counts;
  if (counts) reports_count_upto_[server_rank] = num_leases();
  for (int64_t id = EpochFirstKept(); id <= num_leases(); ++id) MaybeComplete(*FindKept(id), &completed);
  DropSettled();
  return completed;
}

int LeasePool::Release(int worker_rank) {
  int released = 0;
  for (LeaseRecord& record : leases_) {
    if (record.holder != worker_rank) continue;
    record.holder = -1;
    if (record.complete()) continue;  // settled now: its holder will report no more of it
    remainders_.insert(record.id);
    ++released;
  }
  DropSettled();
  return released;
}

void LeasePool::ForgetWorkers(const std::function<bool(int)>& forgotten) {
  for (auto it = handed_.begin(); it != handed_.end();) it = forgotten(it->first) ? handed_.erase(it) : std::next(it);
}

}  // namespace scheduler
}  // namespace pstrain
