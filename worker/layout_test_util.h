// A small model and shard map for the worker's unit tests (header-only, tests only).
#ifndef PSTRAIN_WORKER_LAYOUT_TEST_UTIL_H_
#define PSTRAIN_WORKER_LAYOUT_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "model/param_spec.h"
#include "proto/cluster.pb.h"

namespace pstrain::worker {

// Two tensors, "a" of 6 and "b" of 4 elements; server 0 owns a[0..4), server 1 owns a[4..6) and
// b[0..4).
struct TwoTensorMap {
  std::vector<model::ParamSpec> params;
  ShardMap map;

  TwoTensorMap() {
    params.push_back({"a", {6}, 6, 0, model::InitKind::kZeros, 0, 0});
    params.push_back({"b", {4}, 4, 6, model::InitKind::kZeros, 0, 0});
    for (int i = 0; i < 2; ++i) {
      TensorSpec* t = map.add_tensors();
      t->set_id(i);
      t->set_name(params[i].name);
      t->set_num_elements(params[i].num_elements);
    }
    AddChunk(0, 0, 4, 0);
    AddChunk(0, 4, 2, 1);
    AddChunk(1, 0, 4, 1);
  }

  void AddChunk(int tensor, int64_t offset, int64_t length, int server) {
    ChunkSpec* c = map.add_chunks();
    c->set_tensor_id(tensor);
    c->set_offset(offset);
    c->set_length(length);
    c->set_server_rank(server);
  }
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_LAYOUT_TEST_UTIL_H_
