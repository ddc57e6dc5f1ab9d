#include "scheduler/final_model_assembly.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model_file.h"

namespace pstrain {
namespace scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two tensors over two shards: "w" {4} split 2 + 2, "b" {1} on shard 1.
ShardMap TwoShardMap() {
  ShardMap map;
  TensorSpec* w = map.add_tensors();
  w->set_name("w");
  w->add_shape(4);
  w->set_num_elements(4);
  w->set_flat_offset(0);
  TensorSpec* b = map.add_tensors();
  b->set_name("b");
  b->add_shape(1);
  b->set_num_elements(1);
  b->set_flat_offset(4);
  auto chunk = [&](int tensor, int64_t offset, int64_t length, int server) {
    ChunkSpec* c = map.add_chunks();
    c->set_tensor_id(tensor);
    c->set_offset(offset);
    c->set_length(length);
    c->set_server_rank(server);
  };
  chunk(0, 0, 2, 0);
  chunk(0, 2, 2, 1);
  chunk(1, 0, 1, 1);
  return map;
}

void AddChunk(FinalShard* shard, int tensor, int64_t offset, std::vector<float> values) {
  FinalShard::Chunk* c = shard->add_chunks();
  c->set_tensor_id(tensor);
  c->set_offset(offset);
  c->set_length(static_cast<int64_t>(values.size()));
  c->set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

FinalShard Shard0() {
  FinalShard shard;
  shard.set_shard(0);
  shard.set_server_rank(0);
  AddChunk(&shard, 0, 0, {1, 2});
  return shard;
}

FinalShard Shard1() {
  FinalShard shard;
  shard.set_shard(1);
  shard.set_server_rank(1);
  AddChunk(&shard, 0, 2, {3, 4});
  AddChunk(&shard, 1, 0, {5});
  return shard;
}

TEST(FinalModelAssemblyTest, AssemblesTheModelFromEveryShard) {
  const ShardMap map = TwoShardMap();
  FinalModelAssembly assembly(2);
  ASSERT_TRUE(assembly.Take(Shard1(), map).ok());
  EXPECT_TRUE(assembly.Holds(1));
  EXPECT_FALSE(assembly.Complete());
  ASSERT_TRUE(assembly.Take(Shard0(), map).ok());
  ASSERT_TRUE(assembly.Complete());
  absl::StatusOr<std::string> bytes = assembly.Serialize(map);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<model::ModelFile> file = model::ParseModelFile(*bytes, "assembled model");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->values, ElementsAre(1, 2, 3, 4, 5));
  assembly.MarkWritten();
  EXPECT_TRUE(assembly.written());
}

TEST(FinalModelAssemblyTest, RefusesAShardThatDoesNotMatchTheMapAndKeepsNothingOfIt) {
  const ShardMap map = TwoShardMap();
  FinalModelAssembly assembly(2);
  FinalShard out_of_range = Shard0();
  out_of_range.set_shard(2);
  EXPECT_THAT(assembly.Take(out_of_range, map).message(), HasSubstr("no such shard, expected 0..1"));

  FinalShard missing_chunk = Shard1();
  missing_chunk.mutable_chunks()->RemoveLast();
  EXPECT_THAT(assembly.Take(missing_chunk, map).message(), HasSubstr("1 chunks, expected 2"));

  FinalShard wrong_offset = Shard1();
  wrong_offset.mutable_chunks(0)->set_offset(1);
  EXPECT_THAT(assembly.Take(wrong_offset, map).message(), HasSubstr("expected tensor 0 [2, +2)"));

  FinalShard short_data = Shard0();
  short_data.mutable_chunks(0)->mutable_data()->resize(4);
  EXPECT_THAT(assembly.Take(short_data, map).message(), HasSubstr("holds 4 bytes, expected 8"));

  FinalShard not_finite = Shard1();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(not_finite.mutable_chunks(1)->mutable_data()->data(), &nan, sizeof(float));
  absl::Status s = assembly.Take(not_finite, map);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'b' element 0 is nan"));

  EXPECT_FALSE(assembly.Holds(0));
  EXPECT_FALSE(assembly.Holds(1));
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
