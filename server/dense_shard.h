// DenseShard: the ShardStorage of the shard map's dense chunks this server owns. It holds their
// weights (one flat array, chunks back to back in (tensor_id, offset) order) and one optimizer
// per chunk: the job's, or for an averaged tensor's chunk (TensorSpec.averaged) plain SGD at lr 1
// (constant, no momentum, no weight decay), so the workers' pushes of (pulled - local) make the
// weighted mean of their values.
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

  int64_t num_elements() const override { return static_cast<int64_t>(weights_.size()); }
  int num_parts() const override { return static_cast<int>(chunks_.size()); }
  std::string PartName(int i) const override;
  absl::Status ValidateGradient(absl::string_view what, const PushRequest& req,
                                absl::Span<const PayloadView> values, bool allow_nonfinite) const override;
  void DecodeGradient(const PushRequest& req, absl::Span<const PayloadView> values, float* dst) const override;
  void Apply(int64_t step, const float* grad) override;
  void Read(int first, int count, PullResponse* resp, float* values) const override;
  std::vector<TensorChunk> Snapshot() const override;
  void Save(ShardCheckpoint* ckpt) const override;
  absl::Status ValidateCheckpoint(absl::string_view what, const ShardCheckpoint& ckpt) const override;
  void Install(const ShardCheckpoint& ckpt) override;

 private:
  // One chunk this server owns.
  struct Chunk {
    int32_t tensor_id = 0;
    int64_t offset = 0;  // within the tensor
    int64_t length = 0;
    int64_t base = 0;  // first element in the local layout (weights_, gradients)
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
  const int num_state_vectors_;  // the job's optimizer's (averaged chunks' optimizers have none)
  const uint64_t layout_fingerprint_;

  // The values; the size is constant.
  std::vector<float> weights_;  // local layout
  std::vector<std::unique_ptr<model::Optimizer>> optimizers_;  // per chunk
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_DENSE_SHARD_H_
