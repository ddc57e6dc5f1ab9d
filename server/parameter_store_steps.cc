// ParameterStore, part two: the step rules of SYNC, ASYNC and SSP (which gradients a step sums,
// with which weights, in which order; the float work and the update are the storages'), the
// parking of pulls, and checkpoint snapshots. Every function here
// runs under mu_ and only queues callbacks or snapshots; the public entry points in
// parameter_store.cc run and write them after unlocking.
#include "server/parameter_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain::server {

absl::Status ParameterStore::PushLocked(const PushRequest& req, Parts* grads, Completions* out) {
  absl::Status status = mode_ == SYNC ? PushSyncLocked(req, grads, out) : PushAsyncLocked(req, grads, out);
  VLOG(2) << "server " << rank_ << ": push from worker " << req.worker_rank() << " for step " << req.step()
          << " (" << req.num_samples() << " samples, id " << req.request_id() << "): " << status;
  return status;
}

absl::Status ParameterStore::PushSyncLocked(const PushRequest& req, Parts* grads, Completions* out) {
  const int r = req.worker_rank();
  const int64_t t = req.step();
  Worker& w = workers_.at(r);  // CheckLive passed
  if (t < step_) {
    // The step just applied: this server moved on before (or without) learning of a membership
    // change that made the worker recompute it, or the worker's answer was lost. The global batch
    // is the same whoever computed it, so the applied update stands.
    if (t == step_ - 1) return absl::OkStatus();
    // A retry of an older push whose step has been applied since (its answer was lost).
    if (w.has_last_push && w.last_push_step == t && w.last_push_id == req.request_id()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("push from worker ", r, " for step ", t,
                                                      " is stale: server ", rank_, " is at step ", step_));
  }
  if (t > step_) {
    return absl::FailedPreconditionError(absl::StrCat("push for step ", t, " from the future: server ", rank_,
                                                      " is at step ", step_, " (worker ", r, ")"));
  }
  // The global batch is split evenly among the live workers (data/assignment.h), so no worker's
  // share is larger than this; a claim above it was never handed out and would outweigh the
  // others' gradients in the weighted sum.
  const auto live = static_cast<int64_t>(workers_.size());
  const int64_t share = (max_samples_ + live - 1) / live;
  if (req.num_samples() > share) {
    return absl::InvalidArgumentError(absl::StrCat("push from worker ", r, " for step ", t, ": num_samples is ",
                                                   req.num_samples(), ", expected at most ", share, " (a share of the ",
                                                   "global batch of ", max_samples_, " among ", live, " live workers)"));
  }
  if (req.partial()) return StorePartLocked(req, grads, w, out);
  if (w.pushed || w.stored_parts > 0) {
    const bool retry = w.pushed && w.stored_parts == 0 && w.last_push_id == req.request_id();
    if (retry) return absl::OkStatus();
    return absl::AlreadyExistsError(absl::StrCat("push from worker ", r, " for step ", t, " with request id ",
                                                 req.request_id(), ": the worker already pushed (part of) this "
                                                 "step with request id ", w.last_push_id));
  }
  StoreGradientsLocked(grads, w);
  w.samples = req.num_samples();
  w.wants_checkpoint = req.checkpoint();
  w.has_last_push = true;
  w.last_push_step = t;
  w.last_push_id = req.request_id();
  CompletePushLocked(w, out);
  return absl::OkStatus();
}

absl::Status ParameterStore::StorePartLocked(const PushRequest& req, Parts* grads, Worker& w, Completions* out) {
  const int r = req.worker_rank();
  const int first = req.first_chunk();
  const int count = req.chunks_size();
  const bool known_id = std::find(w.part_ids.begin(), w.part_ids.end(), req.request_id()) != w.part_ids.end();
  for (int i = first; i < first + count; ++i) {
    if (!w.have[i] && !(w.pushed && w.stored_parts == 0)) continue;
    // Stored already: the same part again is a retry (its answer was lost); anything else overlaps.
    if (known_id) return absl::OkStatus();
    return absl::AlreadyExistsError(absl::StrCat(
        "partial push from worker ", r, " for step ", req.step(), " with request id ", req.request_id(),
        ": chunk ", i, " (", PartName(i), ") is already stored for this step"));
  }
  if (w.stored_parts > 0 && req.num_samples() != w.samples) {
    return absl::InvalidArgumentError(absl::StrCat("partial push from worker ", r, " for step ", req.step(),
                                                   ": num_samples is ", req.num_samples(), ", but an earlier part of ",
                                                   "the step said ", w.samples));
  }
  StoreGradientsLocked(grads, w);
  for (int i = first; i < first + count; ++i) w.have[i] = true;
  w.stored_parts += count;
  w.part_ids.push_back(req.request_id());
  w.samples = req.num_samples();
  w.wants_checkpoint = w.wants_checkpoint || req.checkpoint();
  w.has_last_push = true;
  w.last_push_step = req.step();
  w.last_push_id = req.request_id();
  if (w.stored_parts == num_parts_) CompletePushLocked(w, out);
  return absl::OkStatus();
}

void ParameterStore::StoreGradientsLocked(Parts* grads, Worker& w) {
  for (size_t i = 0; i < storages_.size(); ++i) storages_[i]->StoreGradient(*(*grads)[i], w.slots[i].get());
}

void ParameterStore::CompletePushLocked(Worker& w, Completions* out) {
  w.pushed = true;
  if (num_pushed_++ == 0) first_push_at_ = absl::Now();
  if (num_pushed_ == static_cast<int>(workers_.size())) {
    const absl::Duration waited = absl::Now() - first_push_at_;
    typical_wait_ = typical_wait_ == absl::ZeroDuration() ? waited : typical_wait_ + (waited - typical_wait_) / 8;
    if (metrics_.step_wait != nullptr) metrics_.step_wait->Observe(absl::ToDoubleSeconds(waited));
    ApplySyncStepLocked();
    ReleaseReadyLocked(out);
  }
}

void ParameterStore::ApplySyncStepLocked() {
  int64_t total_samples = 0;
  bool checkpoint_asked = false;
  for (const auto& [r, w] : workers_) {
    total_samples += w.samples;
    checkpoint_asked = checkpoint_asked || w.wants_checkpoint;
  }
  if (total_samples > 0) {
    // Ascending rank order (workers_ is a std::map) and fixed weights make the sum, and so the
    // whole run, bitwise repeatable. A worker with no samples is left out rather than multiplied
    // by zero, so it cannot inject NaN. Each storage sums the terms in this order with its own
    // fixed float order (see ShardStorage::Accumulate).
    absl::InlinedVector<std::pair<const Worker*, float>, 8> contributors;
    for (const auto& [r, w] : workers_) {
      if (w.samples == 0) continue;
      contributors.emplace_back(&w, static_cast<float>(static_cast<double>(w.samples) / total_samples));
    }
    absl::InlinedVector<WeightedSlot, 8> terms(contributors.size());
    for (size_t s = 0; s < storages_.size(); ++s) {
      for (size_t i = 0; i < contributors.size(); ++i) {
        terms[i] = WeightedSlot{contributors[i].first->slots[s].get(), contributors[i].second};
      }
      storages_[s]->Accumulate(terms);
      storages_[s]->ApplySum(step_);
    }
  }
  ++step_;
  MaybeSnapshotLocked(checkpoint_asked);
  DropStoredGradientsLocked();
  VLOG(1) << "server " << rank_ << ": applied step " << step_ - 1 << " (" << total_samples << " samples)";
}

absl::Status ParameterStore::PushAsyncLocked(const PushRequest& req, Parts* grads, Completions* out) {
  const int r = req.worker_rank();
  Worker& w = workers_.at(r);  // CheckLive passed
  // Request id 0 means "no id": such pushes are never taken for retries.
  if (req.request_id() != 0 && w.has_last_push && w.last_push_id == req.request_id()) return absl::OkStatus();
  const bool has_lease = req.lease_id() != 0;
  // A data epoch begins only once every lease of the one before is complete, i.e. each of its
  // batches was applied on every server: a leased batch of an older epoch is a repeat.
  const bool ended_epoch = has_lease && req.data_epoch() < data_epoch_;
  if (!ended_epoch && (mode_ == SSP || req.data_epoch() > data_epoch_)) {
    absl::Status status = EnterDataEpochLocked("push", r, req.data_epoch(), out);
    if (!status.ok()) return status;
  }
  const bool repeat = ended_epoch || (has_lease && !applied_batches_.Add(req.lease_id(), req.lease_batch()));
  if (has_lease && !repeat && on_lease_batch_applied_) on_lease_batch_applied_();
  if (repeat) {
    VLOG(1) << "server " << rank_ << ": batch " << req.lease_batch() << " of lease " << req.lease_id()
            << " in data epoch " << req.data_epoch() << " (push from worker " << r
            << ") is already applied; skipped";
  } else if (req.num_samples() > 0) {
    for (size_t i = 0; i < storages_.size(); ++i) storages_[i]->ApplyGradient(step_, *(*grads)[i]);
    ++step_;
    MaybeSnapshotLocked();
  }
  // The same step pushed again: the worker recomputed it because another server failed it.
  const bool same_step =
      w.has_last_push && w.last_push_step == req.step() && w.last_push_data_epoch == req.data_epoch();
  w.has_last_push = true;
  w.last_push_step = req.step();
  w.last_push_data_epoch = req.data_epoch();
  w.last_push_id = req.request_id();
  // The clock counts the worker's steps in the current epoch, repeated batches included (the
  // worker did a step either way), a step pushed again not. The push's step is the worker's own
  // clock, so a replacement server (async recovery) learns the clocks from it instead of holding
  // everyone back from zero.
  if (mode_ == SSP && !ended_epoch) {
    ssp_.Pushed(r, req.step(), same_step);
    ReleaseReadyLocked(out);
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::EnterDataEpochLocked(absl::string_view what, int worker_rank, int32_t data_epoch,
                                                  Completions* out) {
  if (data_epoch < data_epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(what, " from worker ", worker_rank, " for data epoch ",
                                                      data_epoch, ": server ", rank_,
                                                      " is already in data epoch ", data_epoch_));
  }
  if (data_epoch > data_epoch_) {
    LOG(INFO) << "server " << rank_ << ": data epoch " << data_epoch << " begins (" << what << " from worker "
              << worker_rank << ")";
    data_epoch_ = data_epoch;
    applied_batches_.Clear();
    ssp_.NewEpoch();
    ReleaseReadyLocked(out);  // pulls parked in the old epoch
  }
  return absl::OkStatus();
}

void ParameterStore::PullLocked(int worker_rank, int64_t step, int32_t data_epoch, PullResponse* resp, float* values,
                                Done done, Completions* out, PushResponse* push_resp, PullAsk ask) {
  if (mode_ == SYNC && step > step_ + 1) {
    out->push_back({std::move(done), absl::FailedPreconditionError(absl::StrCat(
                                         "pull from worker ", worker_rank, " for step ", step, ": server ", rank_,
                                         " is at step ", step_, " and parks pulls at most one step ahead"))});
    return;
  }
  Waiter waiter{step, data_epoch, resp, values, push_resp, std::move(done), std::move(ask)};
  if (ReadyLocked(waiter)) {
    FillWaiterLocked(waiter);
    out->push_back({std::move(waiter.done), absl::OkStatus(), waiter.ask.first_part});
    return;
  }
  VLOG(2) << "server " << rank_ << ": parking pull from worker " << worker_rank << " for step " << step;
  waiters_.push_back(std::move(waiter));
}

bool ParameterStore::ReadyLocked(const Waiter& waiter) const {
  switch (mode_) {
    case SYNC:
      return step_ >= waiter.step;
    case SSP:
      return waiter.data_epoch < data_epoch_ || ssp_.Ready(waiter.step);
    default:
      return true;
  }
}

void ParameterStore::ReleaseReadyLocked(Completions* out) {
  auto ready_end = std::stable_partition(waiters_.begin(), waiters_.end(),
                                         [this](const Waiter& w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                           return !ReadyLocked(w);
                                         });
  for (auto it = ready_end; it != waiters_.end(); ++it) {
    FillWaiterLocked(*it);
    out->push_back({std::move(it->done), absl::OkStatus(), it->ask.first_part});
  }
  waiters_.erase(ready_end, waiters_.end());
}

ShardCheckpoint ParameterStore::CheckpointLocked() const {
  ShardCheckpoint ckpt;
  ckpt.rank = rank_;
  ckpt.step = step_;
  ckpt.mode = mode_;
  ckpt.membership_epoch = membership_epoch_;
  for (const auto& storage : storages_) storage->Save(&ckpt);
  return ckpt;
}

void ParameterStore::MaybeSnapshotLocked(bool asked) {
  if (checkpoint_dir_.empty() || !writes_checkpoints_) return;
  bool due = asked || (checkpoint_every_ > 0 && step_ % checkpoint_every_ == 0);
  // SYNC servers must agree on the step, so there the workers decide (asked); a clock here would
  // pick a different step on every server.
  const absl::Time now = absl::Now();
  if (mode_ != SYNC && checkpoint_interval_ > absl::ZeroDuration() && now - last_snapshot_ >= checkpoint_interval_) {
    due = true;
  }
  if (!due) return;
  due_checkpoint_ = CheckpointLocked();
  last_snapshot_ = now;
}

void ParameterStore::FillWaiterLocked(const Waiter& w) const {
  if (w.resp != nullptr) FillResponseLocked(w.resp, w.values, w.ask);
  if (w.push_resp != nullptr) w.push_resp->set_step(step_);
}

void ParameterStore::FillResponseLocked(PullResponse* resp, float* values, const PullAsk& ask) const {
  resp->set_step(step_);
  resp->clear_chunks();
  resp->clear_sparse();
  PullAnswer target{resp, values, ask.rows_out};
  for (size_t i = 0; i < storages_.size(); ++i) storages_[i]->Read(*ask.reads[i], &target);
}

}  // namespace pstrain::server
