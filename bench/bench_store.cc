#include "bench/bench_store.h"

#include <algorithm>
#include <vector>

#include <glog/logging.h>

namespace pstrain::bench {

ShardMap OneTensorShardMap(int64_t num_floats, int64_t max_chunk_bytes) {
  ShardMap map;
  map.set_version(1);
  TensorSpec* tensor = map.add_tensors();
  tensor->set_id(0);
  tensor->set_name("bench.weight");
  tensor->add_shape(num_floats);
  tensor->set_num_elements(num_floats);
  tensor->set_init(ZEROS);
  tensor->set_fan_in(num_floats);
  tensor->set_fan_out(1);
  tensor->set_flat_offset(0);
  const int64_t max_floats = std::max<int64_t>(1, max_chunk_bytes / 4);
  for (int64_t offset = 0; offset < num_floats; offset += max_floats) {
    ChunkSpec* chunk = map.add_chunks();
    chunk->set_tensor_id(0);
    chunk->set_offset(offset);
    chunk->set_length(std::min(max_floats, num_floats - offset));
    chunk->set_server_rank(0);
  }
  return map;
}

absl::StatusOr<std::unique_ptr<server::ParameterStore>> NewBenchStore(const ShardMap& map, Mode mode,
                                                                      OptimizerSpec::Type optimizer, int num_workers,
                                                                      double max_grad_norm_per_sample) {
  server::ParameterStore::Options options;
  options.rank = 0;
  options.job.set_mode(mode);
  options.job.set_num_servers(1);
  options.job.set_num_workers(num_workers);
  options.job.mutable_optimizer()->set_type(optimizer);
  options.job.set_max_grad_norm_per_sample(max_grad_norm_per_sample);
  options.shard_map = map;
  options.num_workers = num_workers;
  options.membership_epoch = 1;
  options.total_steps = 1'000'000;
  return server::ParameterStore::Create(options);
}

PushRequest GradientPush(const ShardMap& map, int worker_rank, float value) {
  PushRequest push;
  push.set_worker_rank(worker_rank);
  push.set_membership_epoch(1);
  push.set_step(0);
  push.set_num_samples(1);
  for (const ChunkSpec& c : map.chunks()) {
    TensorChunk* chunk = push.add_chunks();
    chunk->set_tensor_id(c.tensor_id());
    chunk->set_offset(c.offset());
    chunk->set_length(c.length());
    const std::vector<float> values(static_cast<size_t>(c.length()), value);
    chunk->set_data(values.data(), values.size() * sizeof(float));
  }
  return push;
}

std::vector<PushRequest> PartialGradientPushes(const ShardMap& map, int worker_rank, float value, int parts) {
  const PushRequest whole = GradientPush(map, worker_rank, value);
  const int num_chunks = whole.chunks_size();
  CHECK(parts >= 1 && parts <= num_chunks) << parts << " parts of " << num_chunks << " chunks";
  std::vector<PushRequest> out(static_cast<size_t>(parts));
  for (int i = 0; i < parts; ++i) {
    // Chunks [first, end) of the whole push: the first num_chunks % parts parts get one more.
    const int first = i * (num_chunks / parts) + std::min(i, num_chunks % parts);
    const int end = first + num_chunks / parts + (i < num_chunks % parts ? 1 : 0);
    PushRequest& part = out[static_cast<size_t>(i)];
    part = whole;
    part.clear_chunks();
    for (int c = first; c < end; ++c) *part.add_chunks() = whole.chunks(c);
    part.set_partial(true);
    part.set_first_chunk(first);
  }
  return out;
}

}  // namespace pstrain::bench
