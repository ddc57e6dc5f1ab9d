// Helpers shared by the tests of re-cutting checkpoints (checkpoint_reshard_test,
// shard_transfer_service_test): a small MLP's shard map for any server count, and the cut its
// servers would hold with known values.
#ifndef PSTRAIN_SERVER_RESHARD_TEST_UTIL_H_
#define PSTRAIN_SERVER_RESHARD_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "model/mlp.h"
#include "proto/cluster.pb.h"
#include "scheduler/shard_map.h"
#include "server/checkpoint.h"

namespace pstrain::server::reshard_test {

inline constexpr int64_t kStep = 40;

// A small MLP's tensors cut over `servers` servers, chunks of at most 256 bytes (64 floats), so a
// tensor spans several chunks and servers.
inline ShardMap MapOf(int servers) {
  absl::StatusOr<ShardMap> map =
      scheduler::BuildShardMap(scheduler::TensorSpecsOf(model::MlpParamSpecs({20, 16, 3})), servers, 256);
  EXPECT_TRUE(map.ok()) << map.status();
  return *map;
}

// What every server of `map` checkpoints at kStep when the flat model holds value i at element i
// and the two optimizer state vectors -i and 1000 + i.
inline std::vector<ShardCheckpoint> CutOf(const ShardMap& map, int servers) {
  std::vector<ShardCheckpoint> cut(servers);
  for (int r = 0; r < servers; ++r) {
    ShardCheckpoint& ckpt = cut[r];
    ckpt.rank = r;
    ckpt.step = kStep;
    ckpt.mode = SYNC;
    ckpt.membership_epoch = 9;
    ckpt.layout_fingerprint = LayoutFingerprint(map, r);
    ckpt.num_state_vectors = 2;
    ckpt.state.resize(2);
    for (const ChunkSpec& chunk : map.chunks()) {
      if (chunk.server_rank() != r) continue;
      ckpt.chunks.push_back(chunk);
      const int64_t begin = map.tensors(chunk.tensor_id()).flat_offset() + chunk.offset();
      for (int64_t i = begin; i < begin + chunk.length(); ++i) {
        ckpt.weights.push_back(static_cast<float>(i));
        ckpt.state[0].push_back(static_cast<float>(-i));
        ckpt.state[1].push_back(static_cast<float>(1000 + i));
      }
    }
  }
  return cut;
}

}  // namespace pstrain::server::reshard_test

#endif  // PSTRAIN_SERVER_RESHARD_TEST_UTIL_H_
