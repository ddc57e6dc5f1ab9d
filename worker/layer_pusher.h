// Sends a SYNC step's gradient while backward still runs ("Overlap" in docs/DESIGN.md).
//
// The model reports each layer's gradient as soon as backward has produced it (model::GradientSink,
// last layer first). The pusher sends it at once, to every shard that holds a piece of it, as a
// partial PushPull (PushRequest.partial: a contiguous run of the shard's chunks), and to the
// shard's backup as a partial Push that answers once applied. So the transfer of the last layers
// runs while the first layers are still in backward, and a server stores each part as it comes.
// Once every worker's parts are in, the server applies the step and answers every part with that
// part's new weights, first chunk (first layer) first; each answer is copied into the worker's flat
// weights on arrival, on the gRPC thread, while the others are still on the wire.
//
// Small layers are not sent alone: reported tensors wait until they add up to kMinPartBytes (or
// backward is done), since each part is a call with its own fixed cost (for the MLP, whose last
// layers are small, this means one part per shard; for the CNN, fc1's 1.6 MB goes out while the
// convolutions' backward runs).
//
// A failed call ends the step's other calls (PsApi::CancelGroup) and no further part is sent:
// otherwise a part parked on a server that never gets this worker's refused part (the server
// learnt a new membership epoch between two parts) would wait for its deadline. Part i of a step
// carries request id first_request_id + i, so when the trainer sends the same step again under the
// same view with the same ids, parts a server already stored are retries, not conflicts.
//
// One pusher serves every step of a trainer: parts and their messages are kept and reused, so a
// steady-state step allocates nothing here beyond what gRPC does.
//
// Thread safety: Begin, GradientReady and Finish are called from one thread (the trainer's); the
// answer callbacks run on gRPC threads and each writes only its own part and its own chunks of the
// weights.
#ifndef PSTRAIN_WORKER_LAYER_PUSHER_H_
#define PSTRAIN_WORKER_LAYER_PUSHER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "model/model.h"
#include "proto/ps.pb.h"
#include "worker/ps_api.h"
#include "worker/shard_layout.h"
#include "worker/push_encoder.h"
#include "worker/shard_routing.h"

namespace pstrain::worker {

class LayerPusher : public model::GradientSink {
 public:
  // Reported gradients are sent once this many bytes are waiting, or at the end of backward.
  static constexpr int64_t kMinPartBytes = 256 << 10;
  // Request ids one step may use: first_request_id + [0, kIdsPerStep).
  static constexpr uint64_t kIdsPerStep = 1 << 16;

  // `layout` and `ps` are borrowed and must outlive the pusher. `tensor_elements[t]` is tensor t's
  // size (the model's params() order); `min_part_bytes` is kMinPartBytes but for tests.
  LayerPusher(const ShardLayout* layout, PsApi* ps, std::vector<int64_t> tensor_elements,
              int64_t min_part_bytes = kMinPartBytes);
  // REQUIRES: no step in flight (Finish returned).
  ~LayerPusher() override;

  // Starts a step. Its pushes go along `routes` (by shard) and carry the step fields of `header`
  // (worker rank, membership epoch, step, data epoch, num_samples, checkpoint); part i gets
  // request id first_request_id + i. The model writes the gradient into `grad` (flat, host); the
  // answers are copied into `weights` (flat, host). Each part is compressed by `encoder` when it
  // is not null (a compression error fails the step like a failed call). All are borrowed until
  // Finish returns.
  void Begin(const std::vector<ShardRoute>& routes, const PushRequest& header, const float* grad, float* weights,
             uint64_t first_request_id, PushEncoder* encoder = nullptr);

  // The gradients of tensors [first, end) are in `grad` now: sends them, with those reported
  // before and not sent yet, once they add up to kMinPartBytes or `first` is 0 (backward is done).
  void GradientReady(int first, int end) override;

  // Waits for every call of the step and returns the first error to arrive (the one that ended
  // the others), or OK. After OK, `weights` holds the model after
  // the step. INTERNAL if the model did not report every tensor (a bug). On error `weights` may
  // hold the new values of some parts only; the caller discards them (recomputes the step).
  absl::Status Finish();

  // Whether a call of this step has failed (no further part is sent then).
  bool failed() const ABSL_LOCKS_EXCLUDED(mu_);

  // When the step's first part was sent; InfiniteFuture when none was.
  absl::Time first_sent() const { return first_sent_; }
  // Time spent inside GradientReady this step (building and starting the calls).
  absl::Duration send_time() const { return send_time_; }

 private:
  struct Part {
    int shard = 0;
    ShardLayout::ChunkRun run;
    OutgoingPush request;
    IncomingPull response;
    PushResponse backup_response;
  };

  // Sends tensors [first, end) to every shard holding a piece of them.
  void Send(int first, int end);
  // Called once per finished call with its outcome; the first failure cancels the others.
  void CallDone(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the step with `error` unless it failed already: records it for Finish and cancels the
  // step's calls in flight.
  void Fail(const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);

  const ShardLayout* const layout_;
  PsApi* const ps_;
  const std::vector<int64_t> tensor_elements_;
  const int64_t min_part_bytes_;

  // The step in progress (set by Begin).
  const std::vector<ShardRoute>* routes_ = nullptr;
  const PushRequest* header_ = nullptr;
  const float* grad_ = nullptr;
  PushEncoder* encoder_ = nullptr;
  float* weights_ = nullptr;
  uint64_t first_request_id_ = 0;
  absl::Time first_sent_ = absl::InfiniteFuture();
  absl::Duration send_time_;
  // Reported tensors [waiting_first_, waiting_end_) not sent yet; empty when equal.
  int waiting_first_ = 0;
  int waiting_end_ = 0;
  std::vector<int> chunks_sent_;              // by shard, this step
  size_t parts_used_ = 0;                     // parts_[0, parts_used_) belong to this step
  std::vector<std::unique_ptr<Part>> parts_;  // kept across steps

  mutable absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);  // the step's first failed call
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_LAYER_PUSHER_H_
