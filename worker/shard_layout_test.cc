#include "worker/shard_layout.h"

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::worker {
namespace {

using ::testing::HasSubstr;

// Two tensors, 6 + 4 elements; server 0 owns a[0..4), server 1 owns a[4..6) and b[0..4).
struct Fixture {
  std::vector<model::ParamSpec> params;
  ShardMap map;
  Fixture() {
    params.push_back({"a", {6}, 6, 0, model::InitKind::kZeros, 0, 0});
    params.push_back({"b", {4}, 4, 6, model::InitKind::kZeros, 0, 0});
    for (int i = 0; i < 2; ++i) {
      TensorSpec* t = map.add_tensors();
      t->set_id(i);
      t->set_name(params[i].name);
      t->set_num_elements(params[i].num_elements);
    }
    auto add = [&](int tensor, int64_t offset, int64_t length, int server) {
      ChunkSpec* c = map.add_chunks();
      c->set_tensor_id(tensor);
      c->set_offset(offset);
      c->set_length(length);
      c->set_server_rank(server);
    };
    add(0, 0, 4, 0);
    add(0, 4, 2, 1);
    add(1, 0, 4, 1);
  }
};

TEST(ShardLayoutTest, PushCarriesEachServersPiecesOfTheFlatGradient) {
  Fixture f;
  auto layout = ShardLayout::Create(f.map, 2, f.params);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<float> grad = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  PushRequest push;
  layout->FillPush(1, grad.data(), &push);
  ASSERT_EQ(push.chunks_size(), 2);
  EXPECT_EQ(push.chunks(0).tensor_id(), 0);
  EXPECT_EQ(push.chunks(0).offset(), 4);
  float values[4];
  std::memcpy(values, push.chunks(0).data().data(), 2 * sizeof(float));
  EXPECT_EQ(values[0], 4);
  EXPECT_EQ(values[1], 5);
  std::memcpy(values, push.chunks(1).data().data(), 4 * sizeof(float));
  EXPECT_EQ(values[3], 9);
  // Refilling a reused request keeps the same shape.
  layout->FillPush(1, grad.data(), &push);
  EXPECT_EQ(push.chunks_size(), 2);
}

TEST(ShardLayoutTest, PullOfWhatWasPushedRestoresTheFlatVector) {
  Fixture f;
  auto layout = ShardLayout::Create(f.map, 2, f.params);
  ASSERT_TRUE(layout.ok());
  std::vector<float> source = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  std::vector<float> target(10, -1);
  for (int s = 0; s < 2; ++s) {
    PushRequest push;
    layout->FillPush(s, source.data(), &push);
    PullResponse pull;
    *pull.mutable_chunks() = push.chunks();
    ASSERT_TRUE(layout->ApplyPull(s, pull, target.data()).ok());
  }
  EXPECT_EQ(target, source);
}

TEST(ShardLayoutTest, PullWithAWrongChunkIsDataLoss) {
  Fixture f;
  auto layout = ShardLayout::Create(f.map, 2, f.params);
  ASSERT_TRUE(layout.ok());
  std::vector<float> flat(10, 0);
  PushRequest push;
  layout->FillPush(0, flat.data(), &push);
  PullResponse pull;
  *pull.mutable_chunks() = push.chunks();
  pull.mutable_chunks(0)->mutable_data()->resize(8);
  absl::Status s = layout->ApplyPull(0, pull, flat.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'a'"));
  pull.clear_chunks();
  EXPECT_THAT(layout->ApplyPull(0, pull, flat.data()).message(), HasSubstr("got 0 chunks, expected 1"));
}

TEST(ShardLayoutTest, MapThatDoesNotMatchTheModelIsRefused) {
  Fixture f;
  f.params[1].name = "c";
  EXPECT_THAT(ShardLayout::Create(f.map, 2, f.params).status().message(), HasSubstr("'b'"));
  Fixture g;
  EXPECT_THAT(ShardLayout::Create(g.map, 1, g.params).status().message(), HasSubstr("names server 1"));
}

}  // namespace
}  // namespace pstrain::worker
