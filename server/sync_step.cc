#include "server/sync_step.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pstrain::server {
namespace {

int NumParts(const std::vector<std::unique_ptr<ShardStorage>>& storages) {
  int n = 0;
  for (const auto& s : storages) n += s->num_parts();
  return n;
}

}  // namespace

SyncStep::SyncStep(int server_rank, int64_t global_batch, const std::vector<std::unique_ptr<ShardStorage>>* storages)
    : server_rank_(server_rank), global_batch_(global_batch), storages_(*storages), num_parts_(NumParts(*storages)) {}

SyncStep::Contribution SyncStep::NewContribution() const {
  Contribution c;
  for (const auto& storage : storages_) c.slots.push_back(storage->NewSlot());
  c.have.assign(num_parts_, false);
  return c;
}

void SyncStep::SetLive(const std::vector<int>& sorted_ranks) {
  std::map<int, Contribution> next;
  for (int r : sorted_ranks) {
    auto it = workers_.find(r);
    if (it != workers_.end()) {
      next.emplace(r, std::move(it->second));
    } else {
      next.emplace(r, NewContribution());
    }
  }
  workers_ = std::move(next);
  num_pushed_ = 0;
  for (const auto& [r, c] : workers_) num_pushed_ += c.pushed ? 1 : 0;
}

absl::StatusOr<SyncStep::Stored> SyncStep::Push(const PushRequest& req, int64_t step, const LastPush& last,
                                                StorageParts* grads) {
  const int r = req.worker_rank();
  const int64_t t = req.step();
  Contribution& c = workers_.at(r);  // the caller checked that r is live
  if (t < step) {
    // The step just applied: this server moved on before (or without) learning of a membership
    // change that made the worker recompute it, or the worker's answer was lost. The global batch
    // is the same whoever computed it, so the applied update stands.
    if (t == step - 1) return Stored::kNothing;
    // A retry of an older push whose step has been applied since (its answer was lost).
    if (last.known && last.step == t && last.request_id == req.request_id()) return Stored::kNothing;
    return absl::FailedPreconditionError(absl::StrCat("push from worker ", r, " for step ", t, " is stale: server ",
                                                      server_rank_, " is at step ", step));
  }
  if (t > step) {
    return absl::FailedPreconditionError(absl::StrCat("push for step ", t, " from the future: server ", server_rank_,
                                                      " is at step ", step, " (worker ", r, ")"));
  }
  // The global batch is split evenly among the live workers (data/assignment.h), so no worker's
  // share is larger than this; a claim above it was never handed out and would outweigh the
  // others' gradients in the weighted sum.
  const auto live = static_cast<int64_t>(workers_.size());
  const int64_t share = (global_batch_ + live - 1) / live;
  if (req.num_samples() > share) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push from worker ", r, " for step ", t, ": num_samples is ", req.num_samples(), ", expected at most ", share,
        " (a share of the ", "global batch of ", global_batch_, " among ", live, " live workers)"));
  }
  if (req.partial()) return StorePart(req, grads, c);
  if (c.pushed || c.stored_parts > 0) {
    const bool retry = c.pushed && c.stored_parts == 0 && last.request_id == req.request_id();
    if (retry) return Stored::kNothing;
    return absl::AlreadyExistsError(absl::StrCat("push from worker ", r, " for step ", t, " with request id ",
                                                 req.request_id(),
                                                 ": the worker already pushed (part of) this "
                                                 "step with request id ",
                                                 last.request_id));
  }
  StoreGradients(grads, c);
  c.samples = req.num_samples();
  c.wants_checkpoint = req.checkpoint();
  return Complete(c);
}

absl::StatusOr<SyncStep::Stored> SyncStep::StorePart(const PushRequest& req, StorageParts* grads, Contribution& c) {
  const int r = req.worker_rank();
  const int first = req.first_chunk();
  const int count = req.chunks_size();
  const bool known_id = std::find(c.part_ids.begin(), c.part_ids.end(), req.request_id()) != c.part_ids.end();
  for (int i = first; i < first + count; ++i) {
    if (!c.have[i] && !(c.pushed && c.stored_parts == 0)) continue;
    // Stored already: the same part again is a retry (its answer was lost); anything else overlaps.
    if (known_id) return Stored::kNothing;
    return absl::AlreadyExistsError(absl::StrCat("partial push from worker ", r, " for step ", req.step(),
                                                 " with request id ", req.request_id(), ": chunk ", i, " (",
                                                 PartName(i), ") is already stored for this step"));
  }
  if (c.stored_parts > 0 && req.num_samples() != c.samples) {
    return absl::InvalidArgumentError(absl::StrCat("partial push from worker ", r, " for step ", req.step(),
                                                   ": num_samples is ", req.num_samples(), ", but an earlier part of ",
                                                   "the step said ", c.samples));
  }
  StoreGradients(grads, c);
  for (int i = first; i < first + count; ++i) c.have[i] = true;
  c.stored_parts += count;
  c.part_ids.push_back(req.request_id());
  c.samples = req.num_samples();
  c.wants_checkpoint = c.wants_checkpoint || req.checkpoint();
  return c.stored_parts == num_parts_ ? Complete(c) : Stored::kStored;
}

void SyncStep::StoreGradients(StorageParts* grads, Contribution& c) const {
  for (size_t i = 0; i < storages_.size(); ++i) storages_[i]->StoreGradient(*(*grads)[i], c.slots[i].get());
}

SyncStep::Stored SyncStep::Complete(Contribution& c) {
  c.pushed = true;
  if (num_pushed_++ == 0) first_push_at_ = absl::Now();
  return num_pushed_ == static_cast<int>(workers_.size()) ? Stored::kComplete : Stored::kStored;
}

SyncStep::Applied SyncStep::Apply(int64_t step) {
  Applied applied;
  applied.waited = absl::Now() - first_push_at_;
  typical_wait_ =
      typical_wait_ == absl::ZeroDuration() ? applied.waited : typical_wait_ + (applied.waited - typical_wait_) / 8;
  for (const auto& [r, c] : workers_) {
    applied.samples += c.samples;
    applied.checkpoint_asked = applied.checkpoint_asked || c.wants_checkpoint;
  }
  if (applied.samples > 0) {
    // Ascending rank order (workers_ is a std::map) and fixed weights make the sum, and so the
    // whole run, bitwise repeatable. A worker with no samples is left out rather than multiplied
    // by zero, so it cannot inject NaN. Each storage sums the terms in this order with its own
    // fixed float order (see ShardStorage::Accumulate).
    absl::InlinedVector<std::pair<const Contribution*, float>, 8> contributors;
    for (const auto& [r, c] : workers_) {
      if (c.samples == 0) continue;
      contributors.emplace_back(&c, static_cast<float>(static_cast<double>(c.samples) / applied.samples));
    }
    absl::InlinedVector<WeightedSlot, 8> terms(contributors.size());
    for (size_t s = 0; s < storages_.size(); ++s) {
      for (size_t i = 0; i < contributors.size(); ++i) {
        terms[i] = WeightedSlot{contributors[i].first->slots[s].get(), contributors[i].second};
      }
      storages_[s]->Accumulate(terms);
      storages_[s]->ApplySum(step);
    }
  }
  Drop();
  return applied;
}

void SyncStep::Drop() {
  for (auto& [r, c] : workers_) {
    c.pushed = false;
    c.samples = 0;
    c.wants_checkpoint = false;
    if (c.stored_parts > 0) std::fill(c.have.begin(), c.have.end(), false);
    c.stored_parts = 0;
    c.part_ids.clear();
    for (size_t i = 0; i < c.slots.size(); ++i) storages_[i]->ClearSlot(c.slots[i].get());
  }
  num_pushed_ = 0;
}

std::optional<PendingStep> SyncStep::Pending(int64_t step, absl::Time now) const {
  if (num_pushed_ == 0) return std::nullopt;
  PendingStep pending;
  pending.step = step;
  pending.waited = now - first_push_at_;
  pending.typical = typical_wait_;
  for (const auto& [r, c] : workers_) {
    if (!c.pushed) pending.missing.push_back(r);
  }
  return pending;
}

std::string SyncStep::PartName(int part) const {
  for (const auto& storage : storages_) {
    if (part < storage->num_parts()) return storage->PartName(part);
    part -= storage->num_parts();
  }
  return absl::StrCat("part ", part);  // not reached: callers pass a checked part
}

}  // namespace pstrain::server
