// Delta checkpoints of one table (EmbeddingTable::SerializeDelta, server/table_delta.h): a whole
// table at one cut with the deltas of the next ten cuts merged on is, byte for byte, what the table
// serializes at the last cut, for every kind of table state (admission's sketch, eviction's
// metadata, tombstones and clock, half-width rows); a delta holds only the changed rows; and a
// corrupt, foreign or misplaced delta is refused, changing nothing.
#include "server/table_delta.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/embedding_table.h"
#include "server/embedding_table_test_util.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;
using namespace table_test;  // NOLINT: the shared helpers of the table tests

struct Case {
  std::string name;
  TableOptions options;
};

TableOptions Base() {
  TableOptions options;
  options.name = "ads";
  options.id = 2;
  options.dim = 4;
  options.seed = 7;
  options.optimizer.type = SparseOptimizerOptions::Type::kAdagrad;
  options.keep_tombstones = true;
  options.track_changes = true;
  return options;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"plain", Base()});
  Case ttl{"ttl_lfu_cap_count_admission", Base()};
  ttl.options.eviction.set_ttl_updates(6);
  ttl.options.eviction.set_max_rows(150);
  ttl.options.eviction.set_order(EvictionSpec::LFU);
  ttl.options.eviction.set_every_updates(2);
  ttl.options.admission.set_policy(AdmissionSpec::COUNT);
  ttl.options.admission.set_min_count(2);
  ttl.options.admission.set_sketch_bytes(4096);
  cases.push_back(ttl);
  Case seconds{"ttl_seconds_fp16", Base()};
  seconds.options.eviction.set_ttl_seconds(3);
  seconds.options.eviction.set_every_updates(1);
  seconds.options.row_dtype = TableSpec::FP16;
  cases.push_back(seconds);
  Case lazy_adam{"lazy_adam_lru_cap", Base()};
  lazy_adam.options.optimizer.type = SparseOptimizerOptions::Type::kLazyAdam;
  lazy_adam.options.eviction.set_max_rows(100);
  lazy_adam.options.eviction.set_every_updates(1);
  cases.push_back(lazy_adam);
  return cases;
}

// Update `update` of a random 5% of keys in [0, 400), drawn from `rng`, at time `update` seconds.
void RandomUpdate(EmbeddingTable& table, int64_t update, std::mt19937_64& rng) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 400; ++k) {
    if (rng() % 20 == 0) keys.push_back(k);
  }
  std::vector<float> grads(keys.size() * table.dim());
  for (float& g : grads) g = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 1000.0f;
  table.AdvanceClock(update, update * 1000);
  ASSERT_TRUE(table.Apply(keys, grads, 0.1f, update).ok());
  table.AfterUpdate(update);
}

std::string Delta(const EmbeddingTable& table) {
  std::string out;
  table.SerializeDelta(&out);
  return out;
}

// A checkpoint's cut: what the store does after saving.
void Cut(EmbeddingTable& table) {
  table.ForgetChanges();
  table.DropTombstones();
}

class TableDeltaTest : public ::testing::TestWithParam<Case> {};

TEST_P(TableDeltaTest, BasePlusTenDeltasIsTheWholeTableOfTheLastCutByteForByte) {
  std::unique_ptr<EmbeddingTable> table = MakeTable(GetParam().options);
  std::mt19937_64 rng(42);
  int64_t update = 0;
  for (; update < 20; ++update) RandomUpdate(*table, update, rng);
  std::string chain = Bytes(*table);
  Cut(*table);
  int64_t evicted_before = table->counters().evicted;
  for (int cut = 1; cut <= 10; ++cut) {
    for (int i = 0; i < 5; ++i, ++update) RandomUpdate(*table, update, rng);
    const std::string whole = Bytes(*table);
    const std::string delta = Delta(*table);
    Cut(*table);
    absl::StatusOr<std::string> merged = MergeTableDelta(chain, delta, "test");
    ASSERT_TRUE(merged.ok()) << merged.status();
    ASSERT_EQ(*merged, whole) << "cut " << cut;
    chain = *merged;
    // Restored from the chain, a table serializes to the same bytes.
    std::unique_ptr<EmbeddingTable> restored = MakeTable(GetParam().options);
    ASSERT_TRUE(restored->Restore(chain).ok());
    EXPECT_EQ(Bytes(*restored), whole);
  }
  if (GetParam().options.eviction.max_rows() > 0 || GetParam().options.eviction.ttl_updates() > 0) {
    EXPECT_GT(table->counters().evicted, evicted_before) << "the chain never had a tombstone to apply";
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, TableDeltaTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(TableDeltaOnlyTest, ADeltaHoldsOnlyTheRowsChangedSinceTheCut) {
  std::unique_ptr<EmbeddingTable> table = MakeTable(Base());
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 1000; ++k) keys.push_back(k * 3);
  ASSERT_TRUE(table->Apply(keys, std::vector<float>(keys.size() * 4, 0.5f), 0.1f, 0).ok());
  const size_t whole = Bytes(*table).size();
  Cut(*table);
  EXPECT_LT(Delta(*table).size(), 100u);  // a header and no rows
  // 1% of the rows, one of them new.
  std::vector<uint64_t> some = {0, 3, 6, 9, 12, 15, 18, 21, 24, 3001};
  ASSERT_TRUE(table->Apply(some, std::vector<float>(some.size() * 4, 0.5f), 0.1f, 1).ok());
  const size_t record = 8 + 4 * 4 * 2;  // key, value and Adagrad's state
  EXPECT_EQ(Delta(*table).size(), Delta(*MakeTable(Base())).size() + some.size() * record);
  EXPECT_LT(Delta(*table).size() * 50, whole);
}

class TableDeltaErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_ = MakeTable(Base());
    ASSERT_TRUE(table_->Apply({1, 2, 3}, std::vector<float>(12, 1.0f), 0.1f, 0).ok());
    base_ = Bytes(*table_);
    Cut(*table_);
    ASSERT_TRUE(table_->Apply({2, 4}, std::vector<float>(8, 1.0f), 0.1f, 1).ok());
    delta_ = Delta(*table_);
  }
  std::unique_ptr<EmbeddingTable> table_;
  std::string base_, delta_;
};

TEST_F(TableDeltaErrorTest, ACorruptOrTruncatedDeltaIsDataLoss) {
  std::string flipped = delta_;
  flipped[flipped.size() / 2] ^= 1;
  absl::StatusOr<std::string> merged = MergeTableDelta(base_, flipped, "table 'ads' at step 9");
  EXPECT_EQ(merged.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(merged.status().message(), HasSubstr("table 'ads' at step 9 (delta): checksum mismatch"));
  merged = MergeTableDelta(base_, delta_.substr(0, 20), "t");
  EXPECT_EQ(merged.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(TableDeltaErrorTest, MisplacedOrForeignPiecesAreRefused) {
  // The pieces swapped: the base is a delta, the delta a whole table.
  absl::StatusOr<std::string> merged = MergeTableDelta(delta_, delta_, "t");
  EXPECT_EQ(merged.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(merged.status().message(), HasSubstr("the base is a delta"));
  merged = MergeTableDelta(base_, base_, "t");
  EXPECT_EQ(merged.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(merged.status().message(), HasSubstr("not a delta"));
  // Another table's delta.
  TableOptions other = Base();
  other.name = "users";
  std::unique_ptr<EmbeddingTable> foreign = MakeTable(other);
  ASSERT_TRUE(foreign->Apply({5}, std::vector<float>(4, 1.0f), 0.1f, 0).ok());
  merged = MergeTableDelta(base_, Delta(*foreign), "t");
  EXPECT_EQ(merged.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(merged.status().message(), HasSubstr("another table: name users, its base's ads"));
  // A delta is not a table to restore.
  std::unique_ptr<EmbeddingTable> fresh = MakeTable(Base());
  const absl::Status restored = fresh->Restore(delta_);
  EXPECT_EQ(restored.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(restored.message(), HasSubstr("is a delta"));
  EXPECT_EQ(fresh->num_rows(), 0);
}

}  // namespace
}  // namespace pstrain::server
