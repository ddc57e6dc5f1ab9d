#include "server/checkpoint_reshard.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/checkpoint_files.h"
#include "common/key_hash.h"
#include "server/cut_part.h"
#include "server/embedding_table.h"
#include "server/embedding_table_test_util.h"
#include "server/reshard_test_util.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;

using namespace reshard_test;  // NOLINT: the shared helpers of the re-cut tests

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
  EXPECT_THAT(ReshardCheckpoints(tables, three, 3, 0).status().message(),
              HasSubstr("holds 0 embedding tables, but server 0's checkpoint of step 40 holds 1"));

  EXPECT_TRUE(absl::IsInvalidArgument(ReshardCheckpoints(std::vector<ShardCheckpoint>{}, three, 3, 0).status()));
}

TEST(ReadReshardedTest, ReadsEveryOldServersFileOfTheStep) {
  const std::string dir = ::testing::TempDir() + "/read_resharded";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const ShardMap two = MapOf(2), three = MapOf(3);
  const std::vector<ShardCheckpoint> cut = CutOf(two, 2);
  for (const ShardCheckpoint& ckpt : cut)
    ASSERT_TRUE(WriteCheckpoint(CheckpointPath(dir, ckpt.rank, kStep), ckpt).ok());
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

// CutOf's cut with one embedding table: each old server's rows (the keys the jump hash gives it of
// 400), trained with count:2 admission, ttl eviction and tombstones, so that the sketch, the
// clock and the tombstones travel too.
std::vector<ShardCheckpoint> CutWithTableOf(const ShardMap& map, int servers) {
  std::vector<ShardCheckpoint> cut = CutOf(map, servers);
  TableOptions options;
  options.name = "ads";
  options.id = 0;
  options.dim = 4;
  options.seed = 3;
  options.optimizer.type = SparseOptimizerOptions::Type::kAdagrad;
  options.admission.set_policy(AdmissionSpec::COUNT);
  options.admission.set_min_count(2);
  options.admission.set_sketch_bytes(4096);
  options.eviction.set_ttl_updates(3);  // each key comes back every 5 updates: evicted between
  options.eviction.set_every_updates(2);
  options.keep_tombstones = true;
  for (int r = 0; r < servers; ++r) {
    std::unique_ptr<EmbeddingTable> table = table_test::MakeTable(options);
    for (int64_t update = 1; update <= 20; ++update) {
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < 400; ++k) {
        if ((k * 7 + update * 13) % 5 == 0 && ServerOfKey(k, servers) == r) keys.push_back(k);
      }
      std::vector<float> grads(keys.size() * options.dim);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>((i * 31 + update) % 17) / 17.0f - 0.5f;
      table->AdvanceClock(update, update * 1000);
      EXPECT_TRUE(table->Apply(keys, grads, 0.1f, update).ok());
      table->AfterUpdate(update);
    }
    EXPECT_GT(table->num_tombstones(), 0);
    EXPECT_GT(table->num_rows(), 0);
    cut[r].tables.push_back(table_test::Bytes(*table));
  }
  return cut;
}

// Each old server sends each destination only its part (CutPartFor, through its bytes:
// EncodeCheckpoint and DecodeCheckpoint); the destination re-cuts the parts to what the whole cut
// gives, byte for byte, with the same counts, and the parts together hold less than the cut.
TEST(CutPartTest, TheOldServersPartsReCutToWhatTheWholeCutGives) {
  const ShardMap two = MapOf(2);
  const std::vector<ShardCheckpoint> cut = CutWithTableOf(two, 2);
  ASSERT_GT(cut[0].tables[0].size(), 100u);
  for (int servers : {1, 3, 4}) {
    const ShardMap to = MapOf(servers);
    for (int r = 0; r < servers; ++r) {
      std::vector<ShardCheckpoint> parts;
      for (const ShardCheckpoint& own : cut) {
        absl::StatusOr<ShardCheckpoint> part = CutPartFor(own, to, servers, r);
        ASSERT_TRUE(part.ok()) << part.status();
        absl::StatusOr<std::string> bytes = EncodeCheckpoint(*part);
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        EXPECT_EQ(static_cast<int64_t>(bytes->size()), CheckpointFileSize(*part));
        absl::StatusOr<ShardCheckpoint> received = DecodeCheckpoint(*bytes, "the part received");
        ASSERT_TRUE(received.ok()) << received.status();
        EXPECT_LE(received->weights.size(), own.weights.size());
        EXPECT_LE(received->tables[0].size(), own.tables[0].size());
        parts.push_back(*std::move(received));
      }
      ReshardCounts want_counts, got_counts;
      absl::StatusOr<ShardCheckpoint> want = ReshardCheckpoints(cut, to, servers, r, &want_counts);
      absl::StatusOr<ShardCheckpoint> got = ReshardCheckpoints(parts, to, servers, r, &got_counts);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*EncodeCheckpoint(*got), *EncodeCheckpoint(*want)) << servers << " servers, rank " << r;
      EXPECT_EQ(got_counts.rows, want_counts.rows);
      EXPECT_EQ(got_counts.rows_moved, want_counts.rows_moved);
      EXPECT_EQ(got_counts.bytes, want_counts.bytes);
      EXPECT_EQ(got_counts.bytes_moved, want_counts.bytes_moved);
      if (servers > 1) EXPECT_GT(want_counts.rows, 0) << "every destination keeps rows";
    }
  }
  // Going 2 -> 3, new server 2 takes nothing of old server 0's dense values that it does not own.
  const ShardMap three = MapOf(3);
  int64_t owned = 0;
  for (const ChunkSpec& chunk : three.chunks()) owned += chunk.server_rank() == 2 ? chunk.length() : 0;
  const int64_t sent = static_cast<int64_t>(CutPartFor(cut[0], three, 3, 2)->weights.size() +
                                            CutPartFor(cut[1], three, 3, 2)->weights.size());
  EXPECT_EQ(sent, owned);
}

TEST(CutPartTest, RefusesADeltaAForeignChunkAndABadRank) {
  const ShardMap two = MapOf(2), three = MapOf(3);
  const std::vector<ShardCheckpoint> cut = CutOf(two, 2);
  ShardCheckpoint delta = cut[0];
  delta.base_step = 20;
  absl::Status s = CutPartFor(delta, three, 3, 1).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("the part of server 0's checkpoint of step 40 for server 1 of 3: it is a delta"));
  ShardCheckpoint foreign = cut[1];
  foreign.chunks[0].set_tensor_id(99);
  EXPECT_THAT(CutPartFor(foreign, three, 3, 0).status().message(), HasSubstr("outside the model's"));
  ShardCheckpoint short_weights = cut[1];
  short_weights.weights.pop_back();
  EXPECT_THAT(CutPartFor(short_weights, three, 3, 0).status().message(), HasSubstr("weights"));
  EXPECT_THAT(CutPartFor(cut[0], three, 3, 3).status().message(), HasSubstr("expected a server in [0, 3)"));
}

}  // namespace
}  // namespace pstrain::server
