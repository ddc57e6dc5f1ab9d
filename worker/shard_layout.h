// Where each server's chunks live in the worker's flat parameter vector.
//
// The worker keeps weights and gradients as one flat float vector in the model's parameter order;
// the shard map says which (tensor, offset, length) piece each server owns. A ShardLayout turns that
// into flat offsets once, so a push is one memcpy per chunk out of the flat gradient and a pull one
// memcpy per chunk into the flat weights.
#ifndef PSTRAIN_WORKER_SHARD_LAYOUT_H_
#define PSTRAIN_WORKER_SHARD_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/param_spec.h"
#include "proto/cluster.pb.h"
#include "common/tensor_messages.h"
#include "proto/ps.pb.h"

namespace pstrain::worker {

struct ChunkRef {
  int tensor_id = 0;
  int64_t offset = 0;       // First element within the tensor.
  int64_t length = 0;       // Elements.
  int64_t flat_offset = 0;  // First element within the flat parameter vector.
};

// Immutable after creation; safe to share between threads.
class ShardLayout {
 public:
  // Checks that the shard map's tensors match the model's parameters (same count, names and sizes)
  // and that its chunks name servers in [0, num_servers). INVALID_ARGUMENT otherwise, naming the
  // first mismatch.
  static absl::StatusOr<ShardLayout> Create(const ShardMap& map, int num_servers,
                                            const std::vector<model::ParamSpec>& params);

  int num_servers() const { return static_cast<int>(per_server_.size()); }
  const std::vector<ChunkRef>& chunks(int server) const { return per_server_[server]; }
  // The model's name of tensor `tensor_id`, for messages.
  const std::string& tensor_name(int tensor_id) const { return tensor_names_[tensor_id]; }

  // Makes `request` carry the pieces of `flat_grad` that `server` owns, in map order: chunk
  // headers in the message, values pointing into flat_grad (not copied; flat_grad must stay
  // unchanged until the call ends). Reuses the request's storage, so a request kept across steps
  // allocates nothing in steady state.
  void FillPush(int server, const float* flat_grad, OutgoingPush* request) const;

  // The run [first, first + count) of `server`'s chunks whose tensors lie in [first_tensor,
  // end_tensor): chunks are in (tensor, offset) order, so a tensor range is a contiguous run.
  // count == 0 when the server owns none of them.
  struct ChunkRun {
    int first = 0;
    int count = 0;
  };
  ChunkRun RunOfTensors(int server, int first_tensor, int end_tensor) const;

  // FillPush for the run `run` of `server`'s chunks only, as a partial push (PushRequest.partial,
  // first_chunk); the request's other fields are the caller's.
  void FillPartialPush(int server, ChunkRun run, const float* flat_grad, OutgoingPush* request) const;

  // Copies the chunks of `response` into `flat_weights`, straight from the received bytes. The
  // response must hold exactly the chunks the map gives `server`, with the right byte sizes;
  // otherwise DATA_LOSS naming the first mismatch and `flat_weights` may be partly written (the
  // caller discards them).
  absl::Status ApplyPull(int server, const IncomingPull& response, float* flat_weights) const;
  // ApplyPull for the answer to a partial push of `run`: exactly those chunks.
  absl::Status ApplyPartialPull(int server, ChunkRun run, const IncomingPull& response, float* flat_weights) const;

 private:
  // Makes `request` carry exactly the chunks of `run`, reusing its chunk storage.
  void FillChunks(int server, ChunkRun run, const float* flat_grad, OutgoingPush* request) const;

  std::vector<std::vector<ChunkRef>> per_server_;
  std::vector<std::string> tensor_names_;
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_SHARD_LAYOUT_H_
