// The two-tensor model the store's tests and fuzz targets use ("fc1.weight" {4, 5} with He
// initialization, "fc1.bias" {5} zeros; 25 floats), cut into the chunks a test names. No gtest, so
// the fuzz targets can share it. Test-only.
#ifndef PSTRAIN_SERVER_TEST_SHARD_MAP_H_
#define PSTRAIN_SERVER_TEST_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/cluster.pb.h"

namespace pstrain::server::store_test {

// Tensor 0 "fc1.weight" {4, 5} (He), tensor 1 "fc1.bias" {5} (zeros).
inline ShardMap MakeShardMap(const std::vector<ChunkSpec>& chunks, const std::string& weight_name = "fc1.weight") {
  ShardMap map;
  map.set_version(1);
  TensorSpec* w = map.add_tensors();
  w->set_id(0);
  w->set_name(weight_name);
  w->add_shape(4);
  w->add_shape(5);
  w->set_num_elements(20);
  w->set_init(HE_UNIFORM);
  w->set_fan_in(4);
  w->set_fan_out(5);
  TensorSpec* b = map.add_tensors();
  b->set_id(1);
  b->set_name("fc1.bias");
  b->add_shape(5);
  b->set_num_elements(5);
  b->set_init(ZEROS);
  b->set_flat_offset(20);
  for (const ChunkSpec& c : chunks) *map.add_chunks() = c;
  return map;
}

inline ChunkSpec Chunk(int tensor_id, int64_t offset, int64_t length, int server) {
  ChunkSpec c;
  c.set_tensor_id(tensor_id);
  c.set_offset(offset);
  c.set_length(length);
  c.set_server_rank(server);
  return c;
}

}  // namespace pstrain::server::store_test

#endif  // PSTRAIN_SERVER_TEST_SHARD_MAP_H_
