#include "server/checkpoint_reshard.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/checkpoint_files.h"
#include "model/mlp.h"
#include "scheduler/shard_map.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kStep = 40;

// A small MLP's tensors cut over `servers` servers, chunks of at most 256 bytes (64 floats), so a
// tensor spans several chunks and servers.
ShardMap MapOf(int servers) {
  absl::StatusOr<ShardMap> map =
      scheduler::BuildShardMap(scheduler::TensorSpecsOf(model::MlpParamSpecs({20, 16, 3})), servers, 256);
  EXPECT_TRUE(map.ok()) << map.status();
  return *map;
}

// What every server of `map` checkpoints when the flat model holds value i at element i and the two
// optimizer state vectors -i and 1000 + i.
std::vector<ShardCheckpoint> CutOf(const ShardMap& map, int servers) {
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

TEST(ReshardCheckpointsTest, EveryNewServerGetsItsElementsWithTheirOptimizerState) {
  const ShardMap two = MapOf(2);
  const std::vector<ShardCheckpoint> cut = CutOf(two, 2);
  for (int servers : {1, 2, 3, 5}) {
    const ShardMap to = MapOf(servers);
    const std::vector<ShardCheckpoint> want = CutOf(to, servers);
    for (int r = 0; r < servers; ++r) {
      ReshardCounts counts;
      absl::StatusOr<ShardCheckpoint> got = ReshardCheckpoints(cut, to, servers, r, &counts);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->rank, r);
      // What it holds (a weight and two state vectors an element), and what another old rank held:
      // nothing on the same map, all of old server 1's on one server.
      const int64_t kElementBytes = 3 * sizeof(float);
      EXPECT_EQ(counts.bytes, static_cast<int64_t>(got->weights.size()) * kElementBytes);
      if (servers == 2) EXPECT_EQ(counts.bytes_moved, 0);
      if (servers == 1) EXPECT_EQ(counts.bytes_moved, static_cast<int64_t>(cut[1].weights.size()) * kElementBytes);
      EXPECT_EQ(counts.rows, 0);
      EXPECT_EQ(got->step, kStep);
      EXPECT_EQ(got->mode, SYNC);
      EXPECT_EQ(got->membership_epoch, 9);
      EXPECT_EQ(got->layout_fingerprint, want[r].layout_fingerprint) << servers << " servers, rank " << r;
      ASSERT_EQ(got->chunks.size(), want[r].chunks.size());
      for (size_t c = 0; c < got->chunks.size(); ++c) {
        EXPECT_EQ(got->chunks[c].SerializeAsString(), want[r].chunks[c].SerializeAsString());
      }
      EXPECT_EQ(got->weights, want[r].weights) << servers << " servers, rank " << r;
      EXPECT_EQ(got->state, want[r].state) << servers << " servers, rank " << r;
      EXPECT_TRUE(got->tables.empty());
      EXPECT_EQ(got->base_step, -1);
    }
  }
}

TEST(ReshardCheckpointsTest, TwoToThreeToTwoGivesBackTheFirstCut) {
  const ShardMap two = MapOf(2), three = MapOf(3);
  const std::vector<ShardCheckpoint> first = CutOf(two, 2);
  std::vector<ShardCheckpoint> middle;
  for (int r = 0; r < 3; ++r) middle.push_back(*ReshardCheckpoints(first, three, 3, r));
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<ShardCheckpoint> back = ReshardCheckpoints(middle, two, 2, r);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->weights, first[r].weights);
    EXPECT_EQ(back->state, first[r].state);
  }
}

TEST(ReshardCheckpointsTest, RefusesACutThatDoesNotHoldTheModelOnce) {
  const ShardMap two = MapOf(2), three = MapOf(3);
  std::vector<ShardCheckpoint> cut = CutOf(two, 2);

  std::vector<ShardCheckpoint> missing = {cut[0]};
  absl::Status s = ReshardCheckpoints(missing, three, 3, 2).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("no checkpoint holds element"));
  EXPECT_THAT(s.message(), HasSubstr("missing from the cut"));

  std::vector<ShardCheckpoint> twice = {cut[0], cut[1], cut[1]};
  EXPECT_THAT(ReshardCheckpoints(twice, three, 3, 0).status().message(), HasSubstr("is held by both"));

  std::vector<ShardCheckpoint> steps = cut;
  steps[1].step = kStep + 10;
  EXPECT_THAT(ReshardCheckpoints(steps, three, 3, 0).status().message(), HasSubstr("is not of server 0's checkpoint"));

  std::vector<ShardCheckpoint> delta = cut;
  delta[1].base_step = 20;
  EXPECT_THAT(ReshardCheckpoints(delta, three, 3, 0).status().message(), HasSubstr("is a delta on step 20"));

  std::vector<ShardCheckpoint> short_weights = cut;
  short_weights[0].weights.pop_back();
  EXPECT_THAT(ReshardCheckpoints(short_weights, three, 3, 0).status().message(), HasSubstr("weights"));

  std::vector<ShardCheckpoint> tables = cut;
  tables[0].tables.push_back("rows");
  EXPECT_THAT(ReshardCheckpoints(tables, three, 3, 0).status().message(), HasSubstr("holds 0 embedding tables, but server 0's checkpoint of step 40 holds 1"));

  EXPECT_TRUE(absl::IsInvalidArgument(ReshardCheckpoints({}, three, 3, 0).status()));
}

TEST(ReadReshardedTest, ReadsEveryOldServersFileOfTheStep) {
  const std::string dir = ::testing::TempDir() + "/read_resharded";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const ShardMap two = MapOf(2), three = MapOf(3);
  const std::vector<ShardCheckpoint> cut = CutOf(two, 2);
  for (const ShardCheckpoint& ckpt : cut) ASSERT_TRUE(WriteCheckpoint(CheckpointPath(dir, ckpt.rank, kStep), ckpt).ok());
  const std::vector<ShardCheckpoint> want = CutOf(three, 3);
  for (int r = 0; r < 3; ++r) {
    absl::StatusOr<ShardCheckpoint> got = ReadResharded(dir, 2, kStep, three, 3, r);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->weights, want[r].weights);
    EXPECT_EQ(got->state, want[r].state);
  }
  // A missing old file is named.
  absl::Status missing = ReadResharded(dir, 3, kStep, three, 3, 0).status();
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_THAT(missing.message(), HasSubstr("reading the cut of step 40 taken on 3 servers: server 2's checkpoint"));
}

}  // namespace
}  // namespace pstrain::server
