#include "scheduler/shard_map.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

TensorSpec Tensor(const std::string& name, std::vector<int64_t> shape) {
  TensorSpec t;
  t.set_name(name);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  t.set_num_elements(n);
  return t;
}

// The demo model, 784-256-128-10: 235146 floats, 85% of them in fc1.weight.
std::vector<TensorSpec> DemoMlp() {
  return {Tensor("fc1.weight", {784, 256}), Tensor("fc1.bias", {256}),       Tensor("fc2.weight", {256, 128}),
          Tensor("fc2.bias", {128}),        Tensor("fc3.weight", {128, 10}), Tensor("fc3.bias", {10})};
}

int64_t Total(const ShardMap& map) {
  int64_t total = 0;
  for (const TensorSpec& t : map.tensors()) total += t.num_elements();
  return total;
}

// Every element of every tensor is in exactly one chunk.
void ExpectExactCoverage(const ShardMap& map) {
  for (const TensorSpec& t : map.tensors()) {
    std::vector<int> seen(t.num_elements(), 0);
    for (const ChunkSpec& c : map.chunks()) {
      if (c.tensor_id() != t.id()) continue;
      ASSERT_GT(c.length(), 0);
      ASSERT_GE(c.offset(), 0);
      ASSERT_LE(c.offset() + c.length(), t.num_elements());
      for (int64_t i = c.offset(); i < c.offset() + c.length(); ++i) ++seen[i];
    }
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      ASSERT_EQ(seen[i], 1) << "tensor " << t.name() << " element " << i;
    }
  }
}

std::vector<int64_t> ElementsPerServer(const ShardMap& map, int num_servers) {
  std::vector<int64_t> per_server(num_servers, 0);
  for (const ChunkSpec& c : map.chunks()) per_server[c.server_rank()] += c.length();
  return per_server;
}

TEST(ShardMapTest, LaysTensorsOutBackToBack) {
  auto map = BuildShardMap(DemoMlp(), 2, 4 << 20);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->version(), 1);
  ASSERT_EQ(map->tensors_size(), 6);
  const std::vector<int64_t> offsets = {0, 200704, 200960, 233728, 233856, 235136};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(map->tensors(i).id(), i);
    EXPECT_EQ(map->tensors(i).flat_offset(), offsets[i]);
  }
  EXPECT_EQ(Total(*map), 235146);
}

TEST(ShardMapTest, DemoMlpIsCoveredExactlyAndBalancedWithinOneElement) {
  for (int servers = 1; servers <= 5; ++servers) {
    SCOPED_TRACE(servers);
    auto map = BuildShardMap(DemoMlp(), servers, 4 << 20);
    ASSERT_TRUE(map.ok()) << map.status();
    ExpectExactCoverage(*map);
    const std::vector<int64_t> per_server = ElementsPerServer(*map, servers);
    const auto [lo, hi] = std::minmax_element(per_server.begin(), per_server.end());
    EXPECT_LE(*hi - *lo, 1);
    EXPECT_LE(static_cast<double>(*hi), 1.1 * static_cast<double>(*lo));
    EXPECT_EQ(*lo, 235146 / servers);
  }
}

TEST(ShardMapTest, EachServerOwnsOneContiguousFlatRange) {
  auto map = BuildShardMap(DemoMlp(), 3, 64 << 10);
  ASSERT_TRUE(map.ok()) << map.status();
  int64_t expected_begin = 0;
  for (int s = 0; s < 3; ++s) {
    // Walking the chunks (sorted by tensor, offset) visits the flat vector in order; server s's
    // chunks must all be adjacent and start where server s-1 ended.
    int64_t pos = -1;
    for (const ChunkSpec& c : map->chunks()) {
      if (c.server_rank() != s) continue;
      const int64_t begin = map->tensors(c.tensor_id()).flat_offset() + c.offset();
      if (pos == -1) {
        EXPECT_EQ(begin, expected_begin);
      } else {
        EXPECT_EQ(begin, pos) << "server " << s << " has a gap";
      }
      pos = begin + c.length();
    }
    const FlatRange range = ServerFlatRange(*map, s);
    EXPECT_EQ(range.begin, expected_begin);
    EXPECT_EQ(range.end, pos);
    expected_begin = pos;
  }
  EXPECT_EQ(expected_begin, 235146);
}

TEST(ShardMapTest, ChunksAreSortedAndRespectTheMaximumSize) {
  const int64_t max_bytes = 40000;  // 10000 floats: fc1.weight splits into many chunks.
  auto map = BuildShardMap(DemoMlp(), 2, max_bytes);
  ASSERT_TRUE(map.ok()) << map.status();
  ExpectExactCoverage(*map);
  EXPECT_GT(map->chunks_size(), 235146 / 10000);
  for (int i = 0; i < map->chunks_size(); ++i) {
    EXPECT_LE(map->chunks(i).length() * 4, max_bytes);
    if (i > 0) {
      const ChunkSpec& a = map->chunks(i - 1);
      const ChunkSpec& b = map->chunks(i);
      EXPECT_TRUE(a.tensor_id() < b.tensor_id() ||
                  (a.tensor_id() == b.tensor_id() && a.offset() + a.length() == b.offset()))
          << "chunk " << i;
      EXPECT_LE(a.server_rank(), b.server_rank());
    }
  }
}

TEST(ShardMapTest, SmallTensorsStayWholeOnOneServer) {
  auto map = BuildShardMap(DemoMlp(), 1, 4 << 20);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->chunks_size(), 6);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(map->chunks(i).tensor_id(), i);
    EXPECT_EQ(map->chunks(i).offset(), 0);
    EXPECT_EQ(map->chunks(i).length(), map->tensors(i).num_elements());
    EXPECT_EQ(map->chunks(i).server_rank(), 0);
  }
}

TEST(ShardMapTest, IsDeterministic) {
  auto a = BuildShardMap(DemoMlp(), 4, 100000);
  auto b = BuildShardMap(DemoMlp(), 4, 100000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString());
}

TEST(ShardMapTest, MoreServersThanElementsLeavesSomeEmpty) {
  auto map = BuildShardMap({Tensor("t", {3})}, 5, 1024);
  ASSERT_TRUE(map.ok()) << map.status();
  ExpectExactCoverage(*map);
  EXPECT_EQ(map->chunks_size(), 3);
  const std::vector<int64_t> per_server = ElementsPerServer(*map, 5);
  EXPECT_EQ(*std::max_element(per_server.begin(), per_server.end()), 1);
}

TEST(ShardMapTest, RejectsBadArguments) {
  EXPECT_EQ(BuildShardMap({}, 2, 1024).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildShardMap(DemoMlp(), 0, 1024).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildShardMap(DemoMlp(), 2, 6).status().code(), absl::StatusCode::kInvalidArgument);
  TensorSpec wrong = Tensor("fc1.weight", {4, 4});
  wrong.set_num_elements(15);
  absl::Status status = BuildShardMap({wrong}, 1, 1024).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("fc1.weight"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("16"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
