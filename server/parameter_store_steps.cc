// ParameterStore, part two: the step rules of SYNC, ASYNC and SSP (which gradients a step sums,
// with which weights, in which order; the float work and the update are the storages'), the
// parking of pulls, and checkpoint snapshots. Every function here
// runs under mu_ and only queues callbacks or snapshots; the public entry points in
// parameter_store.cc run and write them after unlocking.
#include "server/parameter_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"

namespace pstrain::server {

absl::Status ParameterStore::PushLocked(const PushRequest& req, Parts* grads, Completions* out) {
  absl::Status status = mode_ == SYNC ? PushSyncLocked(req, grads, out) : PushAsyncLocked(req, grads, out);
  VLOG(2) << "server " << rank_ << ": push from worker " << req.worker_rank() << " for step " << req.step() << " ("
          << req.num_samples() << " samples, id " << req.request_id() << "): " << status;
  return status;
}

absl::Status ParameterStore::PushSyncLocked(const PushRequest& req, Parts* grads, Completions* out) {
  LastPush& last = workers_.at(req.worker_rank());  // CheckLive passed
  absl::StatusOr<SyncStep::Stored> stored = sync_.Push(req, step_, last, grads);
  if (!stored.ok()) return stored.status();
  if (*stored == SyncStep::Stored::kNothing) return absl::OkStatus();
  last.known = true;
  last.step = req.step();
  last.request_id = req.request_id();
  if (*stored == SyncStep::Stored::kComplete) ApplySyncStepLocked(out);
  return absl::OkStatus();
}

void ParameterStore::ApplySyncStepLocked(Completions* out) {
  const SyncStep::Applied applied = sync_.Apply(step_);
  if (metrics_.step_wait != nullptr) metrics_.step_wait->Observe(absl::ToDoubleSeconds(applied.waited));
  ++step_;
  MaybeSnapshotLocked(applied.checkpoint_asked);
  VLOG(1) << "server " << rank_ << ": applied step " << step_ - 1 << " (" << applied.samples << " samples)";
  ReleaseReadyLocked(out);
}

absl::Status ParameterStore::PushAsyncLocked(const PushRequest& req, Parts* grads, Completions* out) {
  const int r = req.worker_rank();
  LastPush& last = workers_.at(r);  // CheckLive passed
  // Request id 0 means "no id": such pushes are never taken for retries.
  if (req.request_id() != 0 && last.known && last.request_id == req.request_id()) return absl::OkStatus();
  const absl::StatusOr<AsyncStep::Verdict> verdict = async_.Push(req);
  if (!verdict.ok()) return verdict.status();
  if (verdict->new_epoch) NewDataEpochLocked("push", r, out);
  if (req.lease_id() != 0 && verdict->apply && on_lease_batch_applied_) on_lease_batch_applied_();
  if (!verdict->apply) {
    VLOG(1) << "server " << rank_ << ": batch " << req.lease_batch() << " of lease " << req.lease_id()
            << " in data epoch " << req.data_epoch() << " (push from worker " << r << ") is already applied; skipped";
  } else if (req.num_samples() > 0) {
    for (size_t i = 0; i < storages_.size(); ++i) {
      storages_[i]->AdvanceClock(step_, req.lease_granted_unix_ms());
      storages_[i]->ApplyGradient(step_, *(*grads)[i]);
    }
    ++step_;
    MaybeSnapshotLocked();
  }
  // The same step pushed again: the worker recomputed it because another server failed it.
  const bool same_step = last.known && last.step == req.step() && last.data_epoch == req.data_epoch();
  last.known = true;
  last.step = req.step();
  last.data_epoch = req.data_epoch();
  last.request_id = req.request_id();
  // The clock counts the worker's steps in the current epoch, repeated batches included (the
  // worker did a step either way), a step pushed again not. The push's step is the worker's own
  // clock, so a replacement server (async recovery) learns the clocks from it instead of holding
  // everyone back from zero.
  if (mode_ == SSP && !verdict->ended_epoch) {
    ssp_.Pushed(r, req.step(), same_step);
    ReleaseReadyLocked(out);
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::EnterDataEpochLocked(absl::string_view what, int worker_rank, int32_t data_epoch,
                                                  Completions* out) {
  const absl::StatusOr<bool> entered = async_.EnterEpoch(what, worker_rank, data_epoch);
  if (!entered.ok()) return entered.status();
  if (*entered) NewDataEpochLocked(what, worker_rank, out);
  return absl::OkStatus();
}

void ParameterStore::NewDataEpochLocked(absl::string_view what, int worker_rank, Completions* out) {
  LOG(INFO) << "server " << rank_ << ": data epoch " << async_.data_epoch() << " begins (" << what << " from worker "
            << worker_rank << ")";
  ssp_.NewEpoch();
  ReleaseReadyLocked(out);  // pulls parked in the old epoch
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
      return waiter.data_epoch < async_.data_epoch() || ssp_.Ready(waiter.step);
    default:
      return true;
  }
}

void ParameterStore::ReleaseReadyLocked(Completions* out) {
  auto ready_end =
      std::stable_partition(waiters_.begin(), waiters_.end(),
                            [this](const Waiter& w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !ReadyLocked(w); });
  for (auto it = ready_end; it != waiters_.end(); ++it) {
    FillWaiterLocked(*it);
    out->push_back({std::move(it->done), absl::OkStatus(), it->ask.first_part});
  }
  waiters_.erase(ready_end, waiters_.end());
}

ShardCheckpoint ParameterStore::CheckpointLocked(int64_t base_step) const {
  ShardCheckpoint ckpt;
  ckpt.base_step = base_step;
  ckpt.rank = rank_;
  ckpt.step = step_;
  ckpt.mode = mode_;
  ckpt.membership_epoch = membership_epoch_;
  for (const auto& storage : storages_) storage->Save(&ckpt);
  return ckpt;
}

void ParameterStore::MaybeSnapshotLocked(bool asked) {
  if (checkpoint_dir_.empty()) return;
  bool due = asked || (checkpoint_every_ > 0 && step_ % checkpoint_every_ == 0);
  if (!writes_checkpoints_) {
    // A SYNC copy gets its primary's pushes, so it is due at the same steps: it cuts there too,
    // without a file, and holds what its primary holds after the cut. An ASYNC/SSP copy never
    // cuts (its primary cuts on its own clock): it keeps every tombstone up to the cap, so that
    // promoted, its first checkpoint misses none since its primary's last.
    if (due && mode_ == SYNC) {
      for (const auto& storage : storages_) storage->AfterCheckpointCut();
    }
    return;
  }
  // SYNC servers must agree on the step, so there the workers decide (asked); a clock here would
  // pick a different step on every server.
  const absl::Time now = absl::Now();
  if (mode_ != SYNC && checkpoint_interval_ > absl::ZeroDuration() && now - last_snapshot_ >= checkpoint_interval_) {
    due = true;
  }
  if (!due) return;
  bool storages_can = true;
  for (const auto& storage : storages_) storages_can = storages_can && storage->CanSaveDelta();
  due_checkpoint_ = CheckpointLocked(cadence_.Plan(step_, storages_can));
  for (const auto& storage : storages_) storage->AfterCheckpointCut();
  last_snapshot_ = now;
}

void ParameterStore::FillWaiterLocked(const Waiter& w) const {
  // SYNC: a pull for the step just applied comes from a worker computing it again (its first try
  // was aborted elsewhere), which needs what the step's first try read.
  const bool before_last = mode_ == SYNC && w.step == step_ - 1;
  if (w.resp != nullptr) FillResponseLocked(w.resp, w.values, w.ask, before_last);
  if (w.push_resp != nullptr) w.push_resp->set_step(step_);
}

void ParameterStore::FillResponseLocked(PullResponse* resp, float* values, const PullAsk& ask, bool before_last) const {
  resp->set_step(step_);
  resp->clear_chunks();
  resp->clear_sparse();
  PullAnswer target{resp, values, ask.rows_out};
  for (size_t i = 0; i < storages_.size(); ++i) {
    if (before_last) {
      storages_[i]->ReadBeforeLastSum(*ask.reads[i], &target);
    } else {
      storages_[i]->Read(*ask.reads[i], &target);
    }
  }
}

}  // namespace pstrain::server
