// Shared set-up of the benchmarks: a parameter store holding one tensor of N floats, as a single
// server of a one-tensor model, and the pushes that feed it.
//
// Free functions without state; safe from any thread.
#ifndef PSTRAIN_BENCH_BENCH_STORE_H_
#define PSTRAIN_BENCH_BENCH_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/parameter_store.h"

namespace pstrain::bench {

// The job's default chunk bound (JobSpec.max_chunk_bytes).
inline constexpr int64_t kMaxChunkBytes = int64_t{4} << 20;

// A shard map with one tensor "bench.weight" of `num_floats` zero-initialised floats, cut into
// chunks of at most `max_chunk_bytes`, all owned by server 0. REQUIRES: num_floats > 0.
ShardMap OneTensorShardMap(int64_t num_floats, int64_t max_chunk_bytes = kMaxChunkBytes);

// A store for server 0 of `map` with `num_workers` workers, in `mode`, with `optimizer` at its
// default learning rate. Errors are ParameterStore::Create's.
// `max_grad_norm_per_sample` > 0 turns on the servers' gradient-norm guard (JobSpec).
absl::StatusOr<std::unique_ptr<server::ParameterStore>> NewBenchStore(const ShardMap& map, Mode mode,
                                                                      OptimizerSpec::Type optimizer, int num_workers,
                                                                      double max_grad_norm_per_sample = 0);

// A push from `worker_rank` for step 0 carrying every chunk of `map`, every element `value`
// (small, so thousands of updates stay finite), for one sample. Callers set step and request id.
PushRequest GradientPush(const ShardMap& map, int worker_rank, float value);

// GradientPush cut into `parts` partial pushes (PushRequest.partial), as a worker that overlaps
// sends a step: part i carries the i-th of `parts` contiguous runs of map's chunks, as equal in
// count as they can be, with first_chunk set. Callers set step and a distinct request id per part.
// REQUIRES: 1 <= parts <= map.chunks_size().
std::vector<PushRequest> PartialGradientPushes(const ShardMap& map, int worker_rank, float value, int parts);

}  // namespace pstrain::bench

#endif  // PSTRAIN_BENCH_BENCH_STORE_H_
