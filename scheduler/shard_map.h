// The shard map: which parameter server owns which elements of which tensor.
//
// The model's tensors are laid out back to back (in id order) in one flat vector. That vector is
// cut into `num_servers` contiguous ranges whose sizes differ by at most one element, so bytes per
// server are balanced even when one tensor dominates (the first layer of an MLP holds ~90% of the
// weights). A chunk is the intersection of one tensor with one server's range, cut further so no
// chunk exceeds `max_chunk_bytes`. Hence each server's chunks form one contiguous piece of the flat
// vector, which lets a worker move a server's share with one copy per chunk.
//
//   flat:    [ fc1.weight ............................ | fc1.bias | fc2.weight ... ]
//   servers: [ server 0 ............. | server 1 .............. | server 2 ........ ]
//   chunks:  [ c0      | c1           | c2      | c3   | c4       | c5 ...           ]
//
// Pure function; thread-compatible.
#ifndef PSTRAIN_SCHEDULER_SHARD_MAP_H_
#define PSTRAIN_SCHEDULER_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/param_spec.h"
#include "proto/cluster.pb.h"

namespace pstrain {
namespace scheduler {

// A model's tensors as protos, in the model's order (ids = indices), for BuildShardMap. Tensors
// whose name is in `averaged` get TensorSpec.averaged (names of no tensor are ignored: callers
// check them, scheduler/declared_model.h).
std::vector<TensorSpec> TensorSpecsOf(const std::vector<model::ParamSpec>& params,
                                      const std::vector<std::string>& averaged = {});

// Builds version 1 of the shard map for `tensors` (in model order). Sets each tensor's `id` to its
// index and `flat_offset` to its start in the flat vector; chunks come sorted by (tensor_id, offset).
// The result depends only on the arguments (deterministic).
//
// INVALID_ARGUMENT when there are no tensors, a tensor is empty or its num_elements is not the
// product of its shape, num_servers < 1, or max_chunk_bytes is not a positive multiple of 4.
// With fewer elements than servers, some servers own nothing.
absl::StatusOr<ShardMap> BuildShardMap(std::vector<TensorSpec> tensors, int num_servers, int64_t max_chunk_bytes);

// The half-open range [begin, end) of the flat vector owned by `server_rank` in a map built by
// BuildShardMap (empty when the server owns nothing). For tests and diagnostics.
struct FlatRange {
  int64_t begin = 0;
  int64_t end = 0;
};
FlatRange ServerFlatRange(const ShardMap& map, int server_rank);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SHARD_MAP_H_
