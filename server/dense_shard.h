// DenseShard: the ShardStorage of the shard map's dense chunks this server owns. It holds their
// weights (one flat array, chunks back to back in (tensor_id, offset) order) and one optimizer
// per chunk: the job's, or for an averaged tensor's chunk (TensorSpec.averaged) plain SGD at lr 1
// (constant, no momentum, no weight decay), so the workers' pushes of (pulled - local) make the
// weighted mean of their values.
//
// Its parts are the chunks. SYNC: a worker's GradientSlot is a whole local-layout gradient;
// Accumulate writes the first term's weighted copy and adds the others (float_ops.h), or keeps a
// lone term's gradient as it is (weight 1), the order docs/performance.md measures.
//
// Thread safety: none (see server/shard_storage.h); the ParameterStore calls it under its mutex.
#ifndef PSTRAIN_SERVER_DENSE_SHARD_H_
#define PSTRAIN_SERVER_DENSE_SHARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/optimizer.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "server/shard_storage.h"

namespace pstrain::server {

class DenseShard : public ShardStorage {
 public:
  struct Options {
    // The server rank whose chunks (ChunkSpec.server_rank) this shard holds.
    int rank = 0;
    // The job with its defaults applied (ApplyJobDefaults) and validated; uses optimizer and seed.
    JobSpec job;
    ShardMap shard_map;
    // Updates the whole job makes, for learning-rate schedules.
    int64_t total_steps = 0;
    // The whole model's initial values in the shard map's flat layout, or null for the built-in
    // initialisation (model::FillInitialValues). Read only in Create.
    std::shared_ptr<const std::vector<float>> initial_values;
  };

  // Allocates and initialises the chunks and their optimizers. INVALID_ARGUMENT for a shard map
  // inconsistent with its tensors (ids, ranges, overlapping chunks of this rank) or initial_values
  // of another size than the model. A shard with no chunk is valid.
  static absl::StatusOr<std::unique_ptr<DenseShard>> Create(const Options& options);

  // The ShardStorage calls (server/shard_storage.h). A gradient part borrows the push's chunk
  // views; the SYNC sum and the ASYNC decode use one buffer of num_elements() floats, allocated
  // here once.
  int num_parts() const override { return static_cast<int>(chunks_.size()); }
  std::string PartName(int i) const override;
  int64_t num_values() const override { return num_elements(); }
  absl::StatusOr<std::unique_ptr<StoragePart>> CheckGradient(absl::string_view what, const DecodedPush& push,
                                                             bool allow_nonfinite) const override;
  void AddSquares(const StoragePart& gradient, GradientNorm* norm) const override;
  absl::StatusOr<std::unique_ptr<StoragePart>> CheckRead(absl::string_view what, const ReadAsk& ask) const override;
  std::unique_ptr<GradientSlot> NewSlot() const override;
  void StoreGradient(StoragePart& gradient, GradientSlot* slot) const override;
  void ClearSlot(GradientSlot* slot) const override {}
  void Accumulate(absl::Span<const WeightedSlot> terms) override;
  void ApplySum(int64_t step) override;
  void ApplyGradient(int64_t step, StoragePart& gradient) override;
  void Read(const StoragePart& ask, PullAnswer* answer) const override;
  void AppendSnapshot(std::vector<TensorChunk>* out) const override;
  void AppendTableStats(std::vector<TableStats>* out) const override {}
  void Save(ShardCheckpoint* ckpt) const override;
  absl::StatusOr<std::unique_ptr<PreparedRestore>> PrepareRestore(absl::string_view what,
                                                                  const ShardCheckpoint& ckpt) const override;
  void Install(const ShardCheckpoint& ckpt, std::unique_ptr<PreparedRestore> prepared) override;

  // The same jobs over the local layout (num_elements() floats, the chunks back to back in chunk
  // order), which the calls above are made of; for tests and tools that drive a shard directly.
  int64_t num_elements() const { return static_cast<int64_t>(weights_.size()); }
  // Checks that `req`'s chunks (with data `values[i]`) are a valid gradient for chunks
  // [first, first + chunks) (a whole push: first == 0 and every chunk), their shapes and, unless
  // allow_nonfinite, that every value is finite. INVALID_ARGUMENT prefixed with `what`.
  // REQUIRES: values.size() == req.chunks_size().
  absl::Status ValidateGradient(absl::string_view what, const PushRequest& req, absl::Span<const PayloadView> values,
                                bool allow_nonfinite) const;
  // Decodes the gradient of a validated `req` into `dst` (local layout; only its chunks' range is
  // written). Does not touch the stored values.
  void DecodeGradient(const PushRequest& req, absl::Span<const PayloadView> values, float* dst) const;
  // One optimizer update of every chunk with `grad` (local layout) as update number `step`.
  void Apply(int64_t step, const float* grad);
  // Appends chunks [first, first + count) (count < 0: all) to resp's chunks. With `values`
  // non-null their values go there, back to back, and the chunks carry no data.
  void Read(int first, int count, PullResponse* resp, float* values) const;
  // Every chunk with its current values.
  std::vector<TensorChunk> Snapshot() const;
  // Whether `ckpt` fits this shard (chunk list, fingerprint, optimizer, vector sizes):
  // FAILED_PRECONDITION for another layout or optimizer, INVALID_ARGUMENT for a checkpoint
  // inconsistent in itself; messages prefixed with `what`.
  absl::Status ValidateCheckpoint(absl::string_view what, const ShardCheckpoint& ckpt) const;
  // Installs the weights and optimizer state of a checkpoint ValidateCheckpoint accepted.
  void Install(const ShardCheckpoint& ckpt);

 private:
  // One chunk this server owns.
  struct Chunk {
    int32_t tensor_id = 0;
    int64_t offset = 0;  // within the tensor
    int64_t length = 0;
    int64_t base = 0;       // first element in the local layout (weights_, gradients)
    bool averaged = false;  // TensorSpec.averaged: plain SGD at lr 1, not the job's optimizer
  };

  DenseShard(const Options& options, std::vector<Chunk> chunks, std::vector<std::string> names,
             std::vector<float> weights, std::vector<std::unique_ptr<model::Optimizer>> optimizers,
             int num_state_vectors, uint64_t layout_fingerprint);

  // Constant after construction.
  const int rank_;
  const float base_lr_;
  const model::LrScheduleOptions schedule_;
  const int64_t total_steps_;
  const std::vector<Chunk> chunks_;
  const std::vector<std::string> tensor_names_;  // by tensor id
  const int num_state_vectors_;                  // the job's optimizer's (averaged chunks' optimizers have none)
  const uint64_t layout_fingerprint_;

  // The values; the size is constant.
  std::vector<float> weights_;                                 // local layout
  std::vector<std::unique_ptr<model::Optimizer>> optimizers_;  // per chunk
  // SYNC: the step's weighted sum (Accumulate); ASYNC/SSP: the decoded gradient being applied.
  std::vector<float> sum_;
  // SYNC: what ApplySum applies: sum_, or a lone term's slot as it is.
  const float* step_gradient_ = nullptr;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_DENSE_SHARD_H_
