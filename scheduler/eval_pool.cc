#include "scheduler/eval_pool.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {
namespace {

int64_t LeaseSize(const EvalPool::Options& o) {
  const int64_t parts = 4 * int64_t{o.num_workers};
  return std::max<int64_t>(1, (o.test_samples + parts - 1) / parts);
}

}  // namespace

EvalPool::EvalPool(Options options) : options_(options), lease_size_(LeaseSize(options_)) {
  CHECK_GE(options_.test_samples, 0);
  CHECK_GE(options_.num_workers, 1);
  CHECK_GE(options_.epochs, 1);
}

absl::StatusOr<EvalLease> EvalPool::Next(int worker_rank, int epoch, absl::Time now) {
  if (epoch < 0 || epoch >= options_.epochs) {
    return absl::OutOfRangeError(absl::StrCat("evaluation lease for worker ", worker_rank, ": epoch ", epoch,
                                              " is outside the job's epochs [0, ", options_.epochs, ")"));
  }
  auto [it, opened] = epochs_.try_emplace(epoch);
  EpochPool& pool = it->second;
  if (opened) {
    pool.first = slots_.size();
    for (int64_t begin = 0; begin < options_.test_samples; begin += lease_size_) {
      Slot slot;
      slot.epoch = epoch;
      slot.begin = begin;
      slot.end = std::min(options_.test_samples, begin + lease_size_);
      slots_.push_back(slot);
    }
    pool.count = slots_.size() - pool.first;
  }
  EvalLease lease;
  lease.epoch = epoch;
  bool out = false;
  for (size_t i = pool.first; i < pool.first + pool.count; ++i) {
    Slot& slot = slots_[i];
    if (slot.state == State::kOut) out = true;
    if (slot.state != State::kFree) continue;
    slot.state = State::kOut;
    slot.holder = worker_rank;
    slot.handed = now;
    lease.id = static_cast<int64_t>(i) + 1;
    lease.begin = slot.begin;
    lease.end = slot.end;
    return lease;
  }
  lease.wait = out;
  lease.epoch_done = !out;
  return lease;
}

absl::Status EvalPool::Check(const ProgressReport& report) const {
  for (const EvalStats& eval : report.evals()) {
    const std::string where =
        absl::StrCat("evaluation report from worker ", report.worker_rank(), " for lease ", eval.lease_id());
    if (eval.lease_id() < 1 || eval.lease_id() > static_cast<int64_t>(slots_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown lease id, expected one of the ", slots_.size(),
                                                     " evaluation leases handed out (1..", slots_.size(), ")"));
    }
    const Slot& slot = slots_[eval.lease_id() - 1];
    // Results count only from the worker the lease is out with: another member reporting first
    // would decide the epoch's test numbers with results of a lease it never evaluated. (A
    // reported lease's later results are ignored, whoever sends them: a retry.)
    if (slot.state == State::kFree || (slot.state == State::kOut && slot.holder != report.worker_rank())) {
      return absl::PermissionDeniedError(absl::StrCat(where, ": the lease was not handed to it (",
                                                      slot.state == State::kFree
                                                          ? std::string("it is not out")
                                                          : absl::StrCat("it is out with worker ", slot.holder),
                                                      ")"));
    }
    // A skipped bad record holds no sample, but is one of the lease's records all the same.
    if (eval.skipped_records() < 0 || eval.samples() < 0 ||
        eval.samples() + eval.skipped_records() != slot.end - slot.begin) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": got ", eval.samples(), " samples and ",
                                                     eval.skipped_records(), " skipped records, expected ",
                                                     slot.end - slot.begin, " in all (test samples [", slot.begin, ", ",
                                                     slot.end, ") of epoch ", slot.epoch, ")"));
    }
    if (eval.correct() < 0 || eval.correct() > eval.samples()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": got ", eval.correct(), " correct, expected 0..", eval.samples()));
    }
    // A sum of per-sample losses (cross-entropy, squared error) is finite and never negative.
    if (!std::isfinite(eval.loss_sum()) || eval.loss_sum() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": loss sum ", eval.loss_sum(), ", expected a finite number >= 0"));
    }
    if (absl::Status s = EvalScores::Check(eval, where); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<EvalPool::OutLease> EvalPool::OutLeases() const {
  std::vector<OutLease> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == State::kOut)
      out.push_back({static_cast<int64_t>(i) + 1, slots_[i].holder, slots_[i].handed});
  }
  return out;
}

std::vector<int> EvalPool::Record(const ProgressReport& report, absl::Time now) {
  std::vector<int> changed;
  for (const EvalStats& eval : report.evals()) {
    Slot& slot = slots_[eval.lease_id() - 1];
    if (slot.state == State::kReported) continue;
    if (slot.handed != absl::InfinitePast() && now != absl::InfinitePast()) {
      longest_ = std::max(longest_, now - slot.handed);
    }
    slot.state = State::kReported;
    slot.result = eval;
    slot.result.clear_scores();
    EpochPool& pool = epochs_[slot.epoch];
    pool.scores.Add(eval);
    if (++pool.reported == pool.count) pool.scores.Finish(slot.epoch);
    changed.push_back(slot.epoch);
  }
  std::sort(changed.begin(), changed.end());
  changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
  return changed;
}

int EvalPool::Release(int worker_rank) {
  int released = 0;
  for (Slot& slot : slots_) {
    if (slot.state != State::kOut || slot.holder != worker_rank) continue;
    slot.state = State::kFree;
    slot.holder = -1;
    ++released;
  }
  return released;
}

bool EvalPool::complete(int epoch) const {
  auto it = epochs_.find(epoch);
  return it != epochs_.end() && it->second.reported == it->second.count;
}

bool EvalPool::any_incomplete() const {
  for (const auto& [epoch, pool] : epochs_) {
    if (pool.reported < pool.count) return true;
  }
  return false;
}

int64_t EvalPool::num_out() const {
  int64_t out = 0;
  for (const Slot& slot : slots_) out += slot.state == State::kOut ? 1 : 0;
  return out;
}

const EvalScores* EvalPool::scores(int epoch) const {
  auto it = epochs_.find(epoch);
  return it == epochs_.end() ? nullptr : &it->second.scores;
}

EvalPool::Totals EvalPool::totals(int epoch) const {
  Totals totals;
  auto it = epochs_.find(epoch);
  if (it == epochs_.end()) return totals;
  for (size_t i = it->second.first; i < it->second.first + it->second.count; ++i) {
    const Slot& slot = slots_[i];
    if (slot.state != State::kReported) continue;
    totals.loss_sum += slot.result.loss_sum();
    totals.correct += slot.result.correct();
    totals.samples += slot.result.samples();
  }
  return totals;
}

}  // namespace scheduler
}  // namespace pstrain
