// DenseShard on its own: the storage half of the ParameterStore (server/shard_storage.h), over the
// two-tensor model of store_test_util.h (fc1.weight {4, 5} then fc1.bias {5}; 25 floats).
#include "server/dense_shard.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/job_spec.h"
#include "server/store_test_util.h"

namespace pstrain::server {
namespace {

using store_test::Flat;
using store_test::OneServerMap;
using ::testing::Each;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Initial values: element i of the flat model is i / 8 (exact in float).
DenseShard::Options ShardOptions(OptimizerSpec::Type type, ShardMap map = OneServerMap()) {
  DenseShard::Options options;
  options.rank = 0;
  options.job.set_seed(7);
  options.job.mutable_optimizer()->set_type(type);
  options.job.mutable_optimizer()->set_lr(0.5f);
  ApplyJobDefaults(&options.job);
  options.shard_map = std::move(map);
  options.total_steps = 100;
  auto values = std::make_shared<std::vector<float>>(25);
  for (int i = 0; i < 25; ++i) (*values)[i] = i / 8.0f;
  options.initial_values = values;
  return options;
}

std::unique_ptr<DenseShard> MakeShard(const DenseShard::Options& options) {
  auto shard = DenseShard::Create(options);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return std::move(shard).value();
}

std::vector<float> Gradient(float scale) {
  std::vector<float> g(25);
  for (int i = 0; i < 25; ++i) g[i] = scale * (i % 4 - 1.5f);
  return g;
}

TEST(DenseShardTest, ApplyUpdatesEveryChunkAndReadAnswersTheNewValues) {
  auto shard = MakeShard(ShardOptions(OptimizerSpec::SGD));
  EXPECT_EQ(shard->num_elements(), 25);
  EXPECT_EQ(shard->num_parts(), 2);
  EXPECT_EQ(shard->PartName(1), "tensor 'fc1.bias' at offset 0");
  const std::vector<float> g = Gradient(1.0f);
  shard->Apply(0, g.data());
  std::vector<float> want(25);
  for (int i = 0; i < 25; ++i) want[i] = i / 8.0f - 0.5f * g[i];  // exact: powers of two

  PullResponse chunks;
  shard->Read(0, -1, &chunks, nullptr);
  EXPECT_THAT(Flat(chunks.chunks()), ElementsAreArray(want));
  EXPECT_THAT(Flat(shard->Snapshot()), ElementsAreArray(want));

  // A partial read into a flat buffer: the chunks carry no data.
  PullResponse bias;
  std::vector<float> values(5);
  shard->Read(1, 1, &bias, values.data());
  ASSERT_EQ(bias.chunks_size(), 1);
  EXPECT_EQ(bias.chunks(0).tensor_id(), 1);
  EXPECT_EQ(bias.chunks(0).length(), 5);
  EXPECT_TRUE(bias.chunks(0).data().empty());
  EXPECT_THAT(values, ElementsAreArray(want.begin() + 20, want.end()));
}

TEST(DenseShardTest, DecodeGradientOfAPartialPushWritesOnlyItsChunks) {
  auto shard = MakeShard(ShardOptions(OptimizerSpec::SGD));
  PushRequest req = store_test::MakePush(0, 0, 1, Gradient(1.0f));
  req.set_partial(true);
  req.set_first_chunk(1);
  req.mutable_chunks()->DeleteSubrange(0, 1);
  std::vector<PayloadView> views;
  for (const TensorChunk& c : req.chunks()) views.emplace_back(c.data());
  ASSERT_TRUE(shard->ValidateGradient("push", req, views, false).ok());
  std::vector<float> dst(25, -7.0f);
  shard->DecodeGradient(req, views, dst.data());
  const std::vector<float> g = Gradient(1.0f);
  EXPECT_THAT(std::vector<float>(dst.begin(), dst.begin() + 20), Each(-7.0f));
  EXPECT_THAT(std::vector<float>(dst.begin() + 20, dst.end()), ElementsAreArray(g.begin() + 20, g.end()));

  req.set_first_chunk(0);  // fc1.bias where fc1.weight belongs
  const absl::Status bad = shard->ValidateGradient("push", req, views, false);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("expected tensor 'fc1.weight' at offset 0"));
}

TEST(DenseShardTest, CheckpointRoundTripRestoresWeightsAndOptimizerState) {
  const DenseShard::Options options = ShardOptions(OptimizerSpec::MOMENTUM);
  auto shard = MakeShard(options);
  shard->Apply(0, Gradient(1.0f).data());
  shard->Apply(1, Gradient(0.25f).data());
  ShardCheckpoint ckpt;
  shard->Save(&ckpt);
  EXPECT_EQ(ckpt.num_state_vectors, 1);
  ASSERT_EQ(ckpt.chunks.size(), 2u);
  EXPECT_EQ(ckpt.weights.size(), 25u);

  // A fresh shard takes the checkpoint; the next update is then bitwise the same on both, which
  // needs the momentum restored as well as the weights.
  auto restored = MakeShard(options);
  ASSERT_TRUE(restored->ValidateCheckpoint("restore", ckpt).ok());
  restored->Install(ckpt);
  ShardCheckpoint again;
  restored->Save(&again);
  EXPECT_EQ(again.weights, ckpt.weights);
  EXPECT_EQ(again.state, ckpt.state);
  EXPECT_EQ(again.layout_fingerprint, ckpt.layout_fingerprint);
  shard->Apply(2, Gradient(0.5f).data());
  restored->Apply(2, Gradient(0.5f).data());
  const std::vector<float> a = Flat(shard->Snapshot()), b = Flat(restored->Snapshot());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0);
}

TEST(DenseShardTest, ValidateCheckpointRefusesAnotherOptimizerOrLayout) {
  auto shard = MakeShard(ShardOptions(OptimizerSpec::MOMENTUM));
  ShardCheckpoint ckpt;
  MakeShard(ShardOptions(OptimizerSpec::ADAM))->Save(&ckpt);
  absl::Status status = shard->ValidateCheckpoint("restore", ckpt);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("2 optimizer state vectors, this server's optimizer has 1"));

  shard->Save(&ckpt);
  ckpt.weights.pop_back();
  status = shard->ValidateCheckpoint("restore", ckpt);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("24 weights, expected 25"));

  ShardMap other = OneServerMap();
  other.mutable_tensors(1)->set_averaged(true);
  MakeShard(ShardOptions(OptimizerSpec::MOMENTUM, other))->Save(&ckpt);
  status = shard->ValidateCheckpoint("restore", ckpt);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("layout fingerprint"));
}

TEST(DenseShardTest, AveragedChunkTakesSgdAtLrOneAndKeepsNoState) {
  ShardMap map = OneServerMap();
  map.mutable_tensors(1)->set_averaged(true);
  DenseShard::Options options = ShardOptions(OptimizerSpec::ADAM, map);
  options.job.mutable_optimizer()->set_weight_decay(0.5f);
  auto shard = MakeShard(options);
  const std::vector<float> g = Gradient(1.0f);
  shard->Apply(0, g.data());
  shard->Apply(1, g.data());
  const std::vector<float> w = Flat(shard->Snapshot());
  for (int j = 20; j < 25; ++j) EXPECT_EQ(w[j], j / 8.0f - 2 * g[j]) << "element " << j;
  // fc1.weight follows Adam: each step moves it by about lr = 0.5 against the gradient's sign.
  EXPECT_NE(w[0], 0.0f - 2 * g[0]);
  EXPECT_LT(w[3], 3 / 8.0f);

  ShardCheckpoint ckpt;
  shard->Save(&ckpt);
  ASSERT_EQ(ckpt.num_state_vectors, 2);
  for (int s = 0; s < 2; ++s) {
    EXPECT_THAT(std::vector<float>(ckpt.state[s].begin() + 20, ckpt.state[s].end()), Each(0.0f));
    EXPECT_NE(ckpt.state[s][0], 0.0f);
  }
}

}  // namespace
}  // namespace pstrain::server
