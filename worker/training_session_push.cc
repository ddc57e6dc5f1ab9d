// TrainingSession (worker/training_session.h): moving tensors. A step's push, whole after
// backward or layer by layer during it (LayerPusher), with the same request ids however often it
// is sent; clipping; pulls, and installing what the servers answer into the weights.
#include <algorithm>
#include <cmath>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/step_times.h"
#include "worker/training_session.h"

namespace pstrain::worker {

absl::StatusOr<model::GradientSink*> TrainingSession::BeginStep() {
  if (!step_.active || step_.begun) {
    return absl::FailedPreconditionError(step_.active ? "BeginStep: this step has begun already"
                                                      : "BeginStep: Next() handed out no training step");
  }
  step_.begun = true;
  // Rows of the last step must not be pushed again with this one, nor its refusal count here.
  if (sparse_ != nullptr) sparse_->Clear();
  rows_refused_ = absl::OkStatus();
  if (!overlap_) return static_cast<model::GradientSink*>(nullptr);
  step_weights_.assign(weights_.begin(), weights_.end());  // the same size every step: no allocation
  FillPushHeader(&header_);
  pusher_.Begin(routes_, header_, grad_.data(), weights_.data(), AttemptRequestIds(), encoder_.get());
  return &pusher_;
}

uint64_t TrainingSession::AttemptRequestIds() {
  const AttemptIds key{step_.step, view_.membership_epoch(), epoch_, step_.lease_id, step_.lease_batch, 0};
  if (key.step != attempt_ids_.step || key.membership_epoch != attempt_ids_.membership_epoch ||
      key.epoch != attempt_ids_.epoch || key.lease_id != attempt_ids_.lease_id ||
      key.lease_batch != attempt_ids_.lease_batch) {
    attempt_ids_ = key;
    attempt_ids_.first = next_request_id_;
    next_request_id_ += LayerPusher::kIdsPerStep;
  }
  return attempt_ids_.first;
}

void TrainingSession::GradientReady(int first, int end) {
  if (overlap_ && step_.active && step_.begun) pusher_.GradientReady(first, end);
}

void TrainingSession::AbandonStep() {
  // Calls already started must end before the pusher is used again, whatever happened.
  if (step_.active && step_.begun && overlap_) pusher_.Finish().IgnoreError();
  step_.active = false;
}

void TrainingSession::FillPushHeader(PushRequest* push) const {
  push->set_worker_rank(options_.rank);
  push->set_membership_epoch(view_.membership_epoch());
  push->set_shard_map_version(view_.shard_map().version());
  push->set_step(step_.step);
  push->set_data_epoch(epoch_);
  push->set_num_samples(step_.num_samples);
  push->set_lease_id(step_.lease_id);
  push->set_lease_batch(step_.lease_batch);
  if (!step_.lease_grant.empty()) push->set_lease_grant(step_.lease_grant);
  push->set_lease_granted_unix_ms(step_.lease_granted_unix_ms);
  push->set_checkpoint(ask_checkpoint_);
}

void TrainingSession::ClipGradient() {
  const float max_norm = options_.job.optimizer().clip_grad_norm();
  if (max_norm <= 0) return;
  // The trained tensors' elements: averaged ones carry (pulled - local value), which the servers
  // must see unscaled. Tensors lie back to back in id order, so without averaged tensors this is
  // the whole gradient in order (the same sum).
  const ShardMap& map = options_.view.shard_map();
  auto for_each_trained = [&](auto&& fn) {
    for (size_t i = 0; i < options_.params.size(); ++i) {
      if (static_cast<int>(i) < map.tensors_size() && map.tensors(i).averaged()) continue;
      const model::ParamSpec& p = options_.params[i];
      fn(absl::MakeSpan(grad_.data() + p.flat_offset, p.num_elements));
    }
  };
  double squares = 0;
  for_each_trained([&](absl::Span<float> part) {
    for (float g : part) squares += static_cast<double>(g) * g;
  });
  const double norm = std::sqrt(squares);
  // As torch.nn.utils.clip_grad_norm_: scaled by max_norm / (norm + 1e-6) when that is below 1.
  // A non-finite norm is left alone: the servers refuse the push and say which value.
  if (!std::isfinite(norm) || norm <= max_norm) return;
  const float scale = static_cast<float>(max_norm / (norm + 1e-6));
  for_each_trained([&](absl::Span<float> part) {
    for (float& g : part) g *= scale;
  });
}

absl::Status TrainingSession::PushAfterBackward(StepTimes* times) {
  absl::Time t = Now();
  times->set_compute_seconds(absl::ToDoubleSeconds(t - step_.handed_out));
  ClipGradient();
  const uint64_t request_id = AttemptRequestIds();
  for (int s = 0; s < layout_.num_servers(); ++s) {
    OutgoingPush& push = push_[s];
    push.header.set_shard(s);
    // The copy must have applied the step before this worker moves on (see PsApi).
    push.header.set_wait_until_applied(routes_[s].backup >= 0);
    push.header.set_request_id(request_id);
    FillPushHeader(&push.header);
    layout_.FillPush(s, grad_.data(), &push);
    RETURN_IF_ERROR(encoder_->Encode(s, /*first=*/0, &push));
    push.sparse.clear();
    if (sparse_ != nullptr) sparse_->AddPushRows(s, &push.sparse);
  }
  absl::Time now = Now();
  times->set_push_seconds(absl::ToDoubleSeconds(now - t));
  t = now;
  RETURN_IF_ERROR(ps_->PushPullShards(routes_, push_, &pulled_));
  if (!Sync()) CountStaleness();
  now = Now();
  times->set_wait_seconds(absl::ToDoubleSeconds(now - t));
  t = now;
  RETURN_IF_ERROR(InstallWeights());
  times->set_pull_seconds(absl::ToDoubleSeconds(Now() - t));
  return absl::OkStatus();
}

absl::Status TrainingSession::FinishPushDuringBackward(StepTimes* times) {
  const absl::Time compute_end = Now();
  absl::Status answered = pusher_.Finish();
  const absl::Time now = Now();
  // The pusher times its sends by the real clock; with a simulated one the difference means
  // nothing, so it is kept from going negative.
  times->set_compute_seconds(
      absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), compute_end - step_.handed_out - pusher_.send_time())));
  times->set_push_seconds(absl::ToDoubleSeconds(pusher_.send_time()));
  times->set_wait_seconds(absl::ToDoubleSeconds(now - compute_end));
  times->set_overlapped_seconds(
      absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), compute_end - pusher_.first_sent())));
  RETURN_IF_ERROR(answered);
  // The answers are in weights_ already, copied as they arrived.
  ++weights_version_;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TrainingSession::PullWeights(int64_t step, int epoch) {
  std::vector<PullRequest> requests(layout_.num_servers());
  for (int s = 0; s < layout_.num_servers(); ++s) {
    PullRequest& r = requests[s];
    r.set_shard(s);
    r.set_worker_rank(options_.rank);
    r.set_membership_epoch(view_.membership_epoch());
    r.set_shard_map_version(view_.shard_map().version());
    r.set_step(step);
    r.set_data_epoch(epoch);
  }
  RETURN_IF_ERROR(ps_->PullShards(routes_, requests, &pulled_));
  for (int s = 0; s < layout_.num_servers(); ++s) staleness_.Pulled(s, pulled_[s].header.step());
  int64_t lowest = pulled_[0].header.step();
  for (const IncomingPull& r : pulled_) lowest = std::min(lowest, r.header.step());
  RETURN_IF_ERROR(InstallWeights());
  return lowest;
}

void TrainingSession::CountStaleness() {
  Staleness* report = pending_.mutable_staleness();
  for (int s = 0; s < layout_.num_servers(); ++s) {
    const std::optional<int64_t> staleness = staleness_.PushPulled(s, pulled_[s].header.step());
    if (!staleness.has_value()) continue;
    metrics_->Staleness(*staleness);
    report->set_pulls(report->pulls() + 1);
    report->set_sum(report->sum() + *staleness);
    report->set_max(std::max(report->max(), *staleness));
  }
}

absl::Status TrainingSession::CheckPullable() const {
  if (!(step_.active && step_.begun) && phase_ != Phase::kEvaluate) {
    return absl::FailedPreconditionError("PullRows: neither a begun training step nor an evaluation");
  }
  if (sparse_ == nullptr) {
    return absl::FailedPreconditionError("PullRows: the job declares no embedding tables");
  }
  return absl::OkStatus();
}

absl::Status TrainingSession::PullRows(const std::vector<absl::Span<const uint64_t>>& keys) {
  RETURN_IF_ERROR(CheckPullable());
  if (static_cast<int>(keys.size()) != num_tables()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch keys: got ", keys.size(), " tables' keys, expected ", num_tables(), " (the job's tables)"));
  }
  std::vector<int> all(num_tables());
  for (int t = 0; t < num_tables(); ++t) all[t] = t;
  return PullRows(all, keys);
}

absl::Status TrainingSession::PullRows(absl::Span<const int> tables,
                                       const std::vector<absl::Span<const uint64_t>>& keys) {
  RETURN_IF_ERROR(CheckPullable());
  const bool training = step_.active && step_.begun;
  RETURN_IF_ERROR(sparse_->SetKeys(tables, keys));
  if (training) {
    // A pull refused earlier in this step already decided the step: it is recomputed.
    if (!rows_refused_.ok()) return absl::OkStatus();
    // SYNC: the rows of the weights this step's gradient is computed on; ASYNC/SSP: the latest
    // (the dense weights came with the previous answer, under the same staleness rule).
    rows_refused_ = PullCachedRows(Sync() ? step_.step : 0);
    if (absl::IsAborted(rows_refused_) || absl::IsUnavailable(rows_refused_) ||
        absl::IsFailedPrecondition(rows_refused_)) {
      return absl::OkStatus();  // EndStep recomputes
    }
    return std::exchange(rows_refused_, absl::OkStatus());
  }
  const absl::Time give_up = Now() + options_.membership_timeout;
  while (true) {
    // A rollback learnt of and not applied yet (it is applied when the step is refused): the
    // servers serve the restored step only.
    const absl::Status pulled = PullCachedRows(Sync() ? rewind_to_.value_or(global_step_) : 0);
    if (!absl::IsAborted(pulled) && !absl::IsUnavailable(pulled)) return pulled;
    RETURN_IF_ERROR(AwaitMembership(pulled, give_up));
  }
}

absl::Status TrainingSession::PullCachedRows(int64_t step) {
  std::vector<PullRequest> requests(layout_.num_servers());
  for (int s = 0; s < layout_.num_servers(); ++s) {
    PullRequest& r = requests[s];
    r.set_shard(s);
    r.set_worker_rank(options_.rank);
    r.set_membership_epoch(view_.membership_epoch());
    r.set_shard_map_version(view_.shard_map().version());
    r.set_step(step);
    r.set_data_epoch(epoch_);
    r.set_rows_only(true);
    sparse_->AddPullKeys(s, r.mutable_sparse());
  }
  std::vector<IncomingPull> answers;
  RETURN_IF_ERROR(ps_->PullShards(routes_, requests, &answers));
  for (int s = 0; s < layout_.num_servers(); ++s) RETURN_IF_ERROR(sparse_->ScatterRows(s, SparseOf(answers[s])));
  return absl::OkStatus();
}

absl::Status TrainingSession::InstallWeights() {
  for (int s = 0; s < layout_.num_servers(); ++s) {
    RETURN_IF_ERROR(layout_.ApplyPull(s, pulled_[s], weights_.data()));
    ReleaseValues(&pulled_[s]);
  }
  ++weights_version_;
  return absl::OkStatus();
}

}  // namespace pstrain::worker
