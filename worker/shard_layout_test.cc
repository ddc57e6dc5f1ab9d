#include "worker/shard_layout.h"

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/layout_test_util.h"

namespace pstrain::worker {
namespace {

using ::testing::HasSubstr;

using Fixture = TwoTensorMap;

// The answer a server would give with the values of `push`, as the worker receives it.
IncomingPull AnswerWith(const OutgoingPush& push) {
  IncomingPull pull;
  *pull.header.mutable_chunks() = push.header.chunks();
  for (absl::string_view v : push.values) pull.values.emplace_back(v);
  return pull;
}

TEST(ShardLayoutTest, PushCarriesEachServersPiecesOfTheFlatGradient) {
  Fixture f;
  auto layout = ShardLayout::Create(f.map, 2, f.params);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<float> grad = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  OutgoingPush push;
  layout->FillPush(1, grad.data(), &push);
  ASSERT_EQ(push.header.chunks_size(), 2);
  EXPECT_EQ(push.header.chunks(0).tensor_id(), 0);
  EXPECT_EQ(push.header.chunks(0).offset(), 4);
  EXPECT_EQ(push.header.chunks(0).data(), "");  // the values are not copied into the message...
  ASSERT_EQ(push.values.size(), 2u);
  // ...but point into the flat gradient.
  EXPECT_EQ(push.values[0].data(), reinterpret_cast<const char*>(grad.data() + 4));
  EXPECT_EQ(push.values[0].size(), 2 * sizeof(float));
  EXPECT_EQ(push.values[1].data(), reinterpret_cast<const char*>(grad.data() + 6));
  EXPECT_EQ(push.values[1].size(), 4 * sizeof(float));
  // Refilling a reused request keeps the same shape.
  layout->FillPush(1, grad.data(), &push);
  EXPECT_EQ(push.header.chunks_size(), 2);
  EXPECT_EQ(push.values.size(), 2u);
}

TEST(ShardLayoutTest, PullOfWhatWasPushedRestoresTheFlatVector) {
  Fixture f;
  auto layout = ShardLayout::Create(f.map, 2, f.params);
  ASSERT_TRUE(layout.ok());
  std::vector<float> source = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  std::vector<float> target(10, -1);
  for (int s = 0; s < 2; ++s) {
    OutgoingPush push;
    layout->FillPush(s, source.data(), &push);
    ASSERT_TRUE(layout->ApplyPull(s, AnswerWith(push), target.data()).ok());
  }
  EXPECT_EQ(target, source);
}

TEST(ShardLayoutTest, PullWithAWrongChunkIsDataLoss) {
  Fixture f;
  auto layout = ShardLayout::Create(f.map, 2, f.params);
  ASSERT_TRUE(layout.ok());
  std::vector<float> flat(10, 0);
  OutgoingPush push;
  layout->FillPush(0, flat.data(), &push);
  IncomingPull pull = AnswerWith(push);
  pull.values[0] = PayloadView(push.values[0].substr(0, 8));
  absl::Status s = layout->ApplyPull(0, pull, flat.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'a'"));
  pull.header.clear_chunks();
  pull.values.clear();
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
