// SparseRowsCache: a batch's keys split by shard, pulled all at once or table by table (the
// other tables keep their rows and row gradients), and every table's row gradients pushed.
#include "worker/sparse_rows_cache.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/key_hash.h"
#include "common/sparse_rows.h"
#include "common/tensor_messages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::worker {
namespace {

using ::testing::HasSubstr;

// Tables of dims 2 and 3 over 2 shards.
SparseRowsCache TwoTables() { return SparseRowsCache({2, 3}, 2); }

// The table ids of the entries `cache` asks every shard for.
std::vector<int> PulledTables(const SparseRowsCache& cache) {
  std::vector<int> tables;
  for (int shard = 0; shard < 2; ++shard) {
    google::protobuf::RepeatedPtrField<SparseRows> out;
    cache.AddPullKeys(shard, &out);
    for (const SparseRows& r : out) tables.push_back(r.table_id());
  }
  return tables;
}

// Shard `shard`'s push entries of `cache`, as protobuf would carry them.
google::protobuf::RepeatedPtrField<SparseRows> Pushed(SparseRowsCache& cache, int shard) {
  OutgoingPush push;
  cache.AddPushRows(shard, &push.sparse);
  return Materialize(push).sparse();
}

// Answers the pull of `cache` with rows whose every float is `value`.
void AnswerAll(SparseRowsCache* cache, float value, const std::vector<int>& dims) {
  for (int shard = 0; shard < 2; ++shard) {
    google::protobuf::RepeatedPtrField<SparseRows> asked;
    cache->AddPullKeys(shard, &asked);
    for (SparseRows& r : asked) {
      const std::vector<float> rows(NumKeys(r) * dims[r.table_id()], value);
      SetRows(rows, &r);
    }
    ASSERT_TRUE(cache->ScatterRows(shard, RowsOf(asked)).ok());
  }
}

TEST(SparseRowsCacheTest, TablesPulledOneByOneKeepEachOthersRowsAndGradients) {
  SparseRowsCache cache = TwoTables();
  const std::vector<uint64_t> a = {1, 2, 3, 4};
  const std::vector<uint64_t> b = {5, 6};
  ASSERT_TRUE(cache.SetKeys(std::vector<int>{0}, {a}).ok());
  EXPECT_THAT(PulledTables(cache), ::testing::Each(0));
  AnswerAll(&cache, 1.5f, {2, 3});
  cache.row_gradient(0)[0] = 7;
  ASSERT_TRUE(cache.SetKeys(std::vector<int>{1}, {b}).ok());
  EXPECT_THAT(PulledTables(cache), ::testing::Each(1));  // table 0 is not asked for again
  AnswerAll(&cache, -2.0f, {2, 3});
  EXPECT_THAT(cache.rows(0), ::testing::Each(1.5f));
  EXPECT_EQ(cache.row_gradient(0)[0], 7);
  EXPECT_THAT(cache.rows(1), ::testing::Each(-2.0f));
  EXPECT_EQ(cache.rows(1).size(), 2u * 3);
  // The push carries both tables' row gradients, each key on its shard.
  int pushed = 0;
  for (int shard = 0; shard < 2; ++shard) {
    for (const SparseRows& r : Pushed(cache, shard)) {
      for (uint64_t key : KeysOf(r)) EXPECT_EQ(ServerOfKey(key, 2), shard);
      pushed += static_cast<int>(NumKeys(r));
    }
  }
  EXPECT_EQ(pushed, 6);
  cache.Clear();
  EXPECT_TRUE(cache.keys(0).empty());
  EXPECT_TRUE(cache.rows(1).empty());
  for (int shard = 0; shard < 2; ++shard) {
    EXPECT_EQ(Pushed(cache, shard).size(), 0);
  }
}

// Rows land at their key's place whether a shard holds some keys (gathered) or all (in place),
// and a push carries each key's own gradient row.
TEST(SparseRowsCacheTest, ScatteredRowsAndPushedGradientsFollowTheirKeys) {
  for (int shards : {1, 2}) {
    SparseRowsCache cache({2}, shards);
    const std::vector<uint64_t> keys = {3, 10, 11, 40, 77};
    ASSERT_TRUE(cache.SetKeys({keys}).ok());
    for (size_t i = 0; i < keys.size() * 2; ++i) cache.row_gradient(0)[i] = static_cast<float>(i);
    for (int shard = 0; shard < shards; ++shard) {
      google::protobuf::RepeatedPtrField<SparseRows> asked;
      cache.AddPullKeys(shard, &asked);
      for (SparseRows& r : asked) {
        std::vector<float> rows;
        for (uint64_t key : KeysOf(r)) rows.insert(rows.end(), {key * 1.0f, key * -1.0f});
        SetRows(rows, &r);
      }
      ASSERT_TRUE(cache.ScatterRows(shard, RowsOf(asked)).ok());
      for (const SparseRows& r : Pushed(cache, shard)) {
        const std::vector<uint64_t> pushed_keys = KeysOf(r);
        std::vector<float> grads(pushed_keys.size() * 2);
        CopyRows(r, absl::MakeSpan(grads));
        for (size_t i = 0; i < pushed_keys.size(); ++i) {
          const size_t at = std::find(keys.begin(), keys.end(), pushed_keys[i]) - keys.begin();
          EXPECT_EQ(grads[2 * i], 2.0f * at);
          EXPECT_EQ(grads[2 * i + 1], 2.0f * at + 1);
        }
      }
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(cache.rows(0)[2 * i], keys[i] * 1.0f) << shards << " shards";
      EXPECT_EQ(cache.rows(0)[2 * i + 1], keys[i] * -1.0f);
    }
  }
}

TEST(SparseRowsCacheTest, AnotherServerCountSplitsTheBatchsKeysByTheirNewOwnersForTheNextPull) {
  SparseRowsCache cache = TwoTables();
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 40; ++k) keys.push_back(k * 7919);
  ASSERT_TRUE(cache.SetKeys({0}, {absl::MakeConstSpan(keys)}).ok());
  AnswerAll(&cache, 1.0f, {2, 3});
  cache.SetShards(3);
  // The rows came from the old owners: zeroed, and every table with keys is pulled again.
  EXPECT_THAT(std::vector<float>(cache.rows(0).begin(), cache.rows(0).end()), ::testing::Each(0.0f));
  EXPECT_EQ(cache.rows(0).size(), keys.size() * 2);
  size_t asked = 0;
  for (int shard = 0; shard < 3; ++shard) {
    google::protobuf::RepeatedPtrField<SparseRows> out;
    cache.AddPullKeys(shard, &out);
    for (const SparseRows& r : out) {
      EXPECT_EQ(r.table_id(), 0);
      for (uint64_t key : KeysOf(r)) {
        EXPECT_EQ(ServerOfKey(key, 3), shard) << key;
        ++asked;
      }
    }
  }
  EXPECT_EQ(asked, keys.size());
  EXPECT_EQ(std::vector<uint64_t>(cache.keys(0).begin(), cache.keys(0).end()), keys);
}

TEST(SparseRowsCacheTest, BadTableListsChangeNothing) {
  SparseRowsCache cache = TwoTables();
  const std::vector<uint64_t> a = {1, 2};
  ASSERT_TRUE(cache.SetKeys(std::vector<int>{0}, {a}).ok());
  const std::vector<uint64_t> b = {3};
  const std::vector<uint64_t> unsorted = {4, 3};
  absl::Status unknown = cache.SetKeys(std::vector<int>{2}, {b});
  EXPECT_THAT(unknown.message(), HasSubstr("table id 2, expected one in [0, 2)"));
  absl::Status twice = cache.SetKeys(std::vector<int>{1, 1}, {b, b});
  EXPECT_THAT(twice.message(), HasSubstr("table 1 is listed twice"));
  absl::Status order = cache.SetKeys(std::vector<int>{1}, {unsorted});
  EXPECT_THAT(order.message(), HasSubstr("batch keys of table 1: key 3 at position 1"));
  absl::Status count = cache.SetKeys(std::vector<int>{0, 1}, {b});
  EXPECT_THAT(count.message(), HasSubstr("1 tables' keys for 2 table ids"));
  for (const absl::Status& s : {unknown, twice, order, count}) EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.keys(0).size(), 2u);
  EXPECT_THAT(PulledTables(cache), ::testing::Each(0));
}

}  // namespace
}  // namespace pstrain::worker
