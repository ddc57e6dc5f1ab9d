#include "worker/layer_pusher.h"

#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pstrain::worker {

LayerPusher::LayerPusher(const ShardLayout* layout, PsApi* ps, std::vector<int64_t> tensor_elements,
                         int64_t min_part_bytes)
    : layout_(layout), ps_(ps), tensor_elements_(std::move(tensor_elements)), min_part_bytes_(min_part_bytes) {}

LayerPusher::~LayerPusher() {
  absl::MutexLock lock(&mu_);
  CHECK_EQ(in_flight_, 0) << "LayerPusher destroyed with calls in flight (Finish not called)";
}

void LayerPusher::Begin(const std::vector<ShardRoute>& routes, const PushRequest& header, const float* grad,
                        float* weights, uint64_t first_request_id, PushEncoder* encoder) {
  routes_ = &routes;
  encoder_ = encoder;
  header_ = &header;
  grad_ = grad;
  weights_ = weights;
  first_request_id_ = first_request_id;
  {
    absl::MutexLock lock(&mu_);
    first_error_ = absl::OkStatus();
  }
  first_sent_ = absl::InfiniteFuture();
  send_time_ = absl::ZeroDuration();
  chunks_sent_.assign(layout_->num_servers(), 0);
  parts_used_ = 0;
  waiting_first_ = waiting_end_ = 0;
}

void LayerPusher::GradientReady(int first, int end) {
  const absl::Time start = absl::Now();
  // Reports come last layer first, each range right below the one before.
  if (waiting_first_ == waiting_end_) waiting_end_ = end;
  waiting_first_ = first;
  int64_t waiting_bytes = 0;
  for (int t = waiting_first_; t < waiting_end_; ++t) waiting_bytes += 4 * tensor_elements_[t];
  if (first == 0 || waiting_bytes >= min_part_bytes_) {
    Send(waiting_first_, waiting_end_);
    waiting_end_ = waiting_first_;
  }
  send_time_ += absl::Now() - start;
}

void LayerPusher::Send(int first, int end) {
  for (int shard = 0; shard < layout_->num_servers(); ++shard) {
    if (failed()) return;  // the step is lost: Finish reports why
    const ShardLayout::ChunkRun run = layout_->RunOfTensors(shard, first, end);
    if (run.count == 0) continue;
    if (parts_used_ == parts_.size()) parts_.push_back(std::make_unique<Part>());
    Part* part = parts_[parts_used_++].get();
    part->shard = shard;
    part->run = run;
    OutgoingPush& push = part->request;
    layout_->FillPartialPush(shard, run, grad_, &push);
    PushRequest& req = push.header;
    req.set_worker_rank(header_->worker_rank());
    req.set_membership_epoch(header_->membership_epoch());
    req.set_shard_map_version(header_->shard_map_version());
    req.set_step(header_->step());
    req.set_data_epoch(header_->data_epoch());
    req.set_num_samples(header_->num_samples());
    req.set_checkpoint(header_->checkpoint());
    req.set_shard(shard);
    const uint64_t part_index = parts_used_ - 1;
    CHECK_LT(part_index, kIdsPerStep) << "more parts in one step than request ids reserved for it";
    req.set_request_id(first_request_id_ + part_index);
    const ShardRoute& route = (*routes_)[shard];
    // The copy must have applied the step before this worker moves on (see PsApi).
    req.set_wait_until_applied(route.backup >= 0);
    if (encoder_ != nullptr) {
      if (absl::Status encoded = encoder_->Encode(shard, run.first, &push); !encoded.ok()) {
        Fail(encoded);
        return;
      }
    }
    chunks_sent_[shard] += run.count;
    {
      absl::MutexLock lock(&mu_);
      in_flight_ += route.backup >= 0 ? 2 : 1;
    }
    // Both calls read the same request, so the gradient is not copied again.
    ps_->PushPullAsync(
        route.primary, &push, &part->response,
        [this, part](absl::Status status) {
          if (status.ok()) status = layout_->ApplyPartialPull(part->shard, part->run, part->response, weights_);
          ReleaseValues(&part->response);
          CallDone(status);
        },
        this);
    if (route.backup >= 0) {
      ps_->PushAsync(
          route.backup, &push, &part->backup_response, [this](absl::Status status) { CallDone(status); }, this);
    }
    // A call that failed before this one started could not cancel it: do it now.
    if (failed()) ps_->CancelGroup(this);
  }
  if (first_sent_ == absl::InfiniteFuture() && parts_used_ > 0) first_sent_ = absl::Now();
}

bool LayerPusher::failed() const {
  absl::MutexLock lock(&mu_);
  return !first_error_.ok();
}

void LayerPusher::CallDone(const absl::Status& status) {
  // The error first: Finish returns as soon as nothing is in flight, and must see it.
  if (!status.ok()) Fail(status);
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void LayerPusher::Fail(const absl::Status& error) {
  {
    absl::MutexLock lock(&mu_);
    if (!first_error_.ok()) return;  // the first error already ended the step
    first_error_ = error;
  }
  // Set before cancelling, so Send, which checks after starting a call, cancels any call this
  // misses.
  ps_->CancelGroup(this);
}

absl::Status LayerPusher::Finish() {
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
    mu_.Await(absl::Condition(&idle));
  }
  {
    absl::MutexLock lock(&mu_);
    if (!first_error_.ok()) return first_error_;
  }
  for (int shard = 0; shard < layout_->num_servers(); ++shard) {
    const int owned = static_cast<int>(layout_->chunks(shard).size());
    if (chunks_sent_[shard] != owned) {
      return absl::InternalError(absl::StrCat("step ", header_->step(), ": the model reported ", chunks_sent_[shard],
                                              " of the ", owned, " chunks of shard ", shard,
                                              " (each tensor must be reported exactly once)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain::worker
