// EmbeddingTable with eviction (TableOptions.eviction, server/row_eviction.h): which rows leave
// after an update (TTL, the cap in LRU or LFU order with ties by key, the L2 norm, the keep-floor),
// that a key that comes back starts afresh, that records are reused, and that a restored table
// evicts exactly what the original does.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/embedding_table.h"
#include "server/embedding_table_test_util.h"

namespace pstrain::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace table_test;  // NOLINT: the shared helpers of the table tests

TableOptions Options(const EvictionSpec& eviction,
                     SparseOptimizerOptions::Type type = SparseOptimizerOptions::Type::kSgd) {
  TableOptions options;
  options.name = "user";
  options.id = 1;
  options.dim = 2;
  options.seed = 9;
  options.init_bound = 0.0f;  // rows start at 0, so an SGD update of g leaves -lr * g
  options.optimizer.type = type;
  options.eviction = eviction;
  options.keep_tombstones = true;  // as in a job that checkpoints
  return options;
}

std::unique_ptr<EmbeddingTable> Make(const EvictionSpec& eviction) { return MakeTable(Options(eviction)); }

// One store update `update` bringing `keys` a gradient of `g` each, then the eviction clock.
void Update(EmbeddingTable& table, int64_t update, const std::vector<uint64_t>& keys, float g = 1.0f) {
  ASSERT_TRUE(table.Apply(keys, std::vector<float>(keys.size() * 2, g), 1.0f, update).ok());
  table.AfterUpdate(update);
}

std::vector<uint64_t> Keys(const EmbeddingTable& table, uint64_t below = 100) {
  std::vector<uint64_t> keys;
  std::vector<float> row(2);
  for (uint64_t k = 0; k < below; ++k) {
    if (table.Lookup(k, absl::MakeSpan(row))) keys.push_back(k);
  }
  return keys;
}

TEST(EmbeddingTableEvictionTest, TtlEvictsRowsNotUpdatedForTtlUpdatesAndLeavesTombstones) {
  EvictionSpec spec;
  spec.set_ttl_updates(3);
  spec.set_every_updates(1);
  std::unique_ptr<EmbeddingTable> table = Make(spec);
  Update(*table, 0, {1, 2, 3});
  Update(*table, 1, {2});
  Update(*table, 2, {3});
  EXPECT_THAT(Keys(*table), ElementsAre(1, 2, 3));
  Update(*table, 3, {});  // key 1: last updated by update 0, 3 updates ago
  EXPECT_THAT(Keys(*table), ElementsAre(2, 3));
  Update(*table, 4, {});
  EXPECT_THAT(Keys(*table), ElementsAre(3));
  EXPECT_EQ(table->counters().evicted, 2);
  const std::vector<Tombstone> dead = table->Tombstones();
  ASSERT_EQ(dead.size(), 2u);
  EXPECT_EQ(dead[0], (Tombstone{1, 3}));
  EXPECT_EQ(dead[1], (Tombstone{2, 4}));
}

TEST(EmbeddingTableEvictionTest, AKeyThatComesBackStartsFromItsInitialValueWithFreshState) {
  EvictionSpec spec;
  spec.set_ttl_updates(1);
  spec.set_every_updates(1);
  auto table = EmbeddingTable::Create(Options(spec, SparseOptimizerOptions::Type::kAdagrad));
  ASSERT_TRUE(table.ok());
  auto fresh = EmbeddingTable::Create(Options(EvictionSpec(), SparseOptimizerOptions::Type::kAdagrad));
  ASSERT_TRUE(fresh.ok());
  Update(**table, 0, {7}, 5.0f);
  Update(**table, 1, {});  // key 7 leaves
  EXPECT_EQ((*table)->num_rows(), 0);
  Update(**table, 2, {7}, 0.5f);
  ASSERT_TRUE((*fresh)->Apply({7}, std::vector<float>(2, 0.5f), 1.0f, 2).ok());
  std::vector<float> back(2), once(2);
  ASSERT_TRUE((*table)->Lookup(7, absl::MakeSpan(back)));
  ASSERT_TRUE((*fresh)->Lookup(7, absl::MakeSpan(once)));
  EXPECT_EQ(back, once);  // no trace of the first life's Adagrad accumulator
}

TEST(EmbeddingTableEvictionTest, TheCapEvictsInLruOrLfuOrderWithTiesByKey) {
  EvictionSpec lru;
  lru.set_max_rows(2);
  lru.set_every_updates(1);
  std::unique_ptr<EmbeddingTable> table = Make(lru);
  Update(*table, 0, {5, 6});
  Update(*table, 1, {4, 6});  // 4 and 6 last updated by 1, 5 by 0: 5 goes
  EXPECT_THAT(Keys(*table), ElementsAre(4, 6));
  Update(*table, 2, {1, 2, 3});  // 4 and 6 (update 1) go; then 1 (the smallest key of update 2)
  EXPECT_THAT(Keys(*table), ElementsAre(2, 3));

  EvictionSpec lfu = lru;
  lfu.set_order(EvictionSpec::LFU);
  table = Make(lfu);
  Update(*table, 0, {8, 9});
  Update(*table, 1, {8, 9});
  Update(*table, 2, {1});  // 1 updated once: it goes, although it is the most recent
  EXPECT_THAT(Keys(*table), ElementsAre(8, 9));
}

TEST(EmbeddingTableEvictionTest, SmallNormsLeaveAndTheKeepFloorHoldsTheNewest) {
  EvictionSpec spec;
  spec.set_min_l2_norm(0.5f);
  spec.set_every_updates(1);
  std::unique_ptr<EmbeddingTable> table = Make(spec);
  Update(*table, 0, {1, 2}, 0.1f);  // |row| = 0.1 * sqrt(2) < 0.5
  Update(*table, 1, {3}, 1.0f);     // evicting 1 and 2 happened after update 0
  EXPECT_THAT(Keys(*table), ElementsAre(3));

  EvictionSpec floor;
  floor.set_ttl_updates(1);
  floor.set_keep_rows(2);
  floor.set_every_updates(1);
  table = Make(floor);
  Update(*table, 0, {1, 2});
  Update(*table, 1, {3});
  Update(*table, 2, {});  // 1, 2 (update 0) and 3 (update 1) expired; the floor keeps two
  EXPECT_THAT(Keys(*table), ElementsAre(2, 3));
}

TEST(EmbeddingTableEvictionTest, EvictionRunsEveryNUpdatesAndRecordsAreReused) {
  EvictionSpec spec;
  spec.set_ttl_updates(1);
  spec.set_every_updates(4);
  std::unique_ptr<EmbeddingTable> table = Make(spec);
  for (int64_t u = 0; u < 3; ++u) Update(*table, u, {static_cast<uint64_t>(10 + u)});
  EXPECT_EQ(table->num_rows(), 3);  // not due yet: after update 3
  Update(*table, 3, {20});
  EXPECT_THAT(Keys(*table), ElementsAre(20));
  // A new key an update, for ever: the rows stay at 1 to 5, and so does their memory; only the
  // tombstones grow (up to RowEviction::kMaxTombstones).
  auto rows_bytes = [&] {
    return table->bytes_used() - static_cast<int64_t>(table->Tombstones().size() * sizeof(Tombstone));
  };
  int64_t bytes = 0;
  for (int64_t u = 4; u < 400; ++u) {
    Update(*table, u, {static_cast<uint64_t>(1000 + u)});
    if (u == 99) bytes = rows_bytes();
  }
  EXPECT_EQ(rows_bytes(), bytes);
  EXPECT_EQ(table->counters().evicted, 399);  // every row but the newest
}

TEST(EmbeddingTableEvictionTest, ARestoredTableEvictsExactlyWhatTheOriginalDoes) {
  EvictionSpec spec;
  spec.set_ttl_updates(5);
  spec.set_max_rows(300);
  spec.set_order(EvictionSpec::LFU);
  spec.set_every_updates(2);
  std::unique_ptr<EmbeddingTable> original = Make(spec);
  auto keys_of = [](int64_t u) {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 100; ++k) keys.push_back((k * 7 + static_cast<uint64_t>(u) * 31) % 1000);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
  };
  for (int64_t u = 0; u < 9; ++u) Update(*original, u, keys_of(u));
  std::unique_ptr<EmbeddingTable> restored = Make(spec);
  ASSERT_TRUE(restored->Restore(Bytes(*original)).ok());
  EXPECT_EQ(Bytes(*restored), Bytes(*original));
  for (int64_t u = 9; u < 20; ++u) {
    Update(*original, u, keys_of(u));
    Update(*restored, u, keys_of(u));
  }
  EXPECT_GT(original->counters().evicted, 0);
  EXPECT_EQ(Bytes(*restored), Bytes(*original));  // rows, metadata and tombstones
}

TEST(EmbeddingTableEvictionTest, TombstonesAreKeptOnlyForACheckpointWhichTakesThem) {
  EvictionSpec spec;
  spec.set_ttl_updates(1);
  spec.set_every_updates(1);
  // Without a checkpoint to record them (keep_tombstones off) there are none.
  TableOptions options = Options(spec);
  options.keep_tombstones = false;
  std::unique_ptr<EmbeddingTable> none = std::move(EmbeddingTable::Create(options)).value();
  for (int64_t u = 0; u < 10; ++u) Update(*none, u, {static_cast<uint64_t>(u)});
  EXPECT_EQ(none->counters().evicted, 9);  // after update u >= 1, key u - 1 leaves
  EXPECT_EQ(none->num_tombstones(), 0);

  // With it: the evictions since the last cut; the cut (a checkpoint recorded them) drops them.
  std::unique_ptr<EmbeddingTable> table = Make(spec);
  for (int64_t u = 0; u < 5; ++u) Update(*table, u, {static_cast<uint64_t>(u)});
  EXPECT_THAT(table->Tombstones(), ElementsAre(Tombstone{0, 1}, Tombstone{1, 2}, Tombstone{2, 3}, Tombstone{3, 4}));
  table->DropTombstones();
  EXPECT_EQ(table->num_tombstones(), 0);
  Update(*table, 5, {5});
  EXPECT_THAT(table->Tombstones(), ElementsAre(Tombstone{4, 5}));
  EXPECT_EQ(table->counters().evicted, 5);
}

TEST(EmbeddingTableEvictionTest, PastTheCapTheOldestTombstonesGoAndTheCheckpointSaysHowMany) {
  EvictionSpec spec;
  spec.set_ttl_updates(1);
  spec.set_every_updates(1);
  std::unique_ptr<EmbeddingTable> table = Make(spec);
  // One new key an update: after update u >= 1, key u - 1 leaves.
  const int64_t kLost = 5;
  const int64_t updates = static_cast<int64_t>(RowEviction::kMaxTombstones) + kLost + 1;
  for (int64_t u = 0; u < updates; ++u) Update(*table, u, {static_cast<uint64_t>(u)});
  EXPECT_EQ(table->num_tombstones(), static_cast<int64_t>(RowEviction::kMaxTombstones));
  EXPECT_EQ(table->tombstones_lost(), kLost);
  EXPECT_EQ(table->Tombstones().front(), (Tombstone{static_cast<uint64_t>(kLost), kLost + 1}));
  // The count travels with the checkpoint, and a cut forgets it with the tombstones.
  std::unique_ptr<EmbeddingTable> restored = Make(spec);
  ASSERT_TRUE(restored->Restore(Bytes(*table)).ok());
  EXPECT_EQ(restored->tombstones_lost(), kLost);
  EXPECT_EQ(Bytes(*restored), Bytes(*table));
  table->DropTombstones();
  EXPECT_EQ(table->tombstones_lost(), 0);
  EXPECT_EQ(table->num_tombstones(), 0);
}

// A server's memory budget cuts a table to a cap (server/table_budget.h): the least recently
// updated rows go, ties by key, the keep-floor holds, each leaves a tombstone; a table without an
// eviction rule keeps the metadata for it (track_rows) and evicts nothing on its own.
TEST(EmbeddingTableEvictionTest, EvictToCapTakesTheLeastRecentlyUpdatedAndKeepsTheFloor) {
  TableOptions options = Options(EvictionSpec());
  options.track_rows = true;
  std::unique_ptr<EmbeddingTable> table = std::move(EmbeddingTable::Create(options)).value();
  Update(*table, 0, {5, 6, 7});
  Update(*table, 1, {1, 2});
  Update(*table, 2, {6});
  for (int64_t u = 3; u < 300; ++u) Update(*table, u, {});
  EXPECT_EQ(table->num_rows(), 5);  // no rule, no eviction
  table->EvictToCap(3, 300);
  // Left first: 5 and 7 (update 0; by key), then 1 and 2 (update 1); 6 (update 2) last.
  EXPECT_THAT(Keys(*table), ElementsAre(1, 2, 6));
  EXPECT_THAT(table->Tombstones(), ElementsAre(Tombstone{5, 300}, Tombstone{7, 300}));
  EXPECT_EQ(table->num_tombstones(), 2);
  EXPECT_EQ(table->counters().evicted, 2);
  table->EvictToCap(5, 301);  // within the cap: nothing
  EXPECT_EQ(table->num_rows(), 3);

  EvictionSpec floor;
  floor.set_keep_rows(2);
  options.eviction = floor;
  table = std::move(EmbeddingTable::Create(options)).value();
  Update(*table, 0, {1, 2, 3, 4});
  table->EvictToCap(0, 1);
  EXPECT_THAT(Keys(*table), ElementsAre(3, 4));  // ties at update 0: by key
}

TEST(EmbeddingTableEvictionTest, RowsOfACheckpointWithoutEvictionGetAFullTtlFromItsStep) {
  // A job resumed with eviction newly on, from a checkpoint of step 100 written without it: its
  // rows count as updated by update 99, not as never updated (which would evict them all at once).
  std::unique_ptr<EmbeddingTable> before = Make(EvictionSpec());
  Update(*before, 0, {1, 2});
  EvictionSpec spec;
  spec.set_ttl_updates(5);
  spec.set_every_updates(1);
  std::unique_ptr<EmbeddingTable> table = Make(spec);
  ASSERT_TRUE(table->Restore(Bytes(*before), /*last_update=*/99).ok());
  Update(*table, 100, {2});
  Update(*table, 103, {});
  EXPECT_THAT(Keys(*table), ElementsAre(1, 2));
  Update(*table, 104, {});  // key 1: last updated by 99, 5 updates ago
  EXPECT_THAT(Keys(*table), ElementsAre(2));
}

// One update at the scheduler's time `unix_ms` (its push's lease time): the clock, then the update.
void UpdateAt(EmbeddingTable& table, int64_t update, int64_t unix_ms, const std::vector<uint64_t>& keys) {
  table.AdvanceClock(update, unix_ms);
  Update(table, update, keys);
}

TEST(EmbeddingTableEvictionTest, TtlInSecondsRunsOnTheLeaseTimesOfTheUpdates) {
  constexpr int64_t kT0 = 1'800'000'000'000;  // ms
  EvictionSpec spec;
  spec.set_ttl_seconds(10);
  spec.set_every_updates(1);
  std::unique_ptr<EmbeddingTable> table = Make(spec);
  UpdateAt(*table, 0, kT0, {1, 2});
  UpdateAt(*table, 1, kT0 + 4000, {2, 3});
  UpdateAt(*table, 2, kT0 + 9999, {4});
  EXPECT_THAT(Keys(*table), ElementsAre(1, 2, 3, 4));
  // Key 1 was last updated 10 s ago; key 2 only 6 s ago.
  UpdateAt(*table, 3, kT0 + 10000, {});
  EXPECT_THAT(Keys(*table), ElementsAre(2, 3, 4));
  EXPECT_THAT(table->Tombstones(), ElementsAre(Tombstone{1, 3}));
  // A push of an older lease, applied later, moves no clock backward and evicts nothing more; a
  // push without a time neither.
  UpdateAt(*table, 4, kT0 + 2000, {5});
  UpdateAt(*table, 5, 0, {});
  EXPECT_THAT(Keys(*table), ElementsAre(2, 3, 4, 5));
  // Updates count for nothing: no time passes, no row leaves, however many there are.
  for (int64_t u = 6; u < 100; ++u) UpdateAt(*table, u, kT0 + 10000, {});
  EXPECT_THAT(Keys(*table), ElementsAre(2, 3, 4, 5));
  // 14 s: keys 2 and 3 (4 s) are 10 s old; 4 and 5 (updates 2 and 4, at 9.999 s and 10 s) are not.
  UpdateAt(*table, 100, kT0 + 14000, {});
  EXPECT_THAT(Keys(*table), ElementsAre(4, 5));
}

TEST(EmbeddingTableEvictionTest, ARestoredTableKeepsTheClockOfTtlSeconds) {
  constexpr int64_t kT0 = 1'800'000'000'000;
  EvictionSpec spec;
  spec.set_ttl_seconds(3);
  spec.set_every_updates(2);
  std::unique_ptr<EmbeddingTable> original = Make(spec);
  auto keys_of = [](int64_t u) {
    return std::vector<uint64_t>{static_cast<uint64_t>(u % 7), static_cast<uint64_t>(10 + u)};
  };
  for (int64_t u = 0; u < 20; ++u) UpdateAt(*original, u, kT0 + 250 * u, keys_of(u));
  std::unique_ptr<EmbeddingTable> restored = Make(spec);
  ASSERT_TRUE(restored->Restore(Bytes(*original)).ok());
  EXPECT_EQ(Bytes(*restored), Bytes(*original));
  for (int64_t u = 20; u < 60; ++u) {
    UpdateAt(*original, u, kT0 + 250 * u, keys_of(u));
    UpdateAt(*restored, u, kT0 + 250 * u, keys_of(u));
  }
  EXPECT_GT(original->counters().evicted, 30);
  EXPECT_EQ(Bytes(*restored), Bytes(*original));  // rows, metadata, tombstones and the clock
}

TEST(EmbeddingTableEvictionTest, BadPoliciesAreRefusedNamingTheField) {
  struct Case {
    void (*edit)(EvictionSpec*);
    const char* message;
  } cases[] = {
      {[](EvictionSpec* e) { e->set_ttl_updates(-1); }, "table 'user'.eviction.ttl_updates: got -1, expected >= 0"},
      {[](EvictionSpec* e) {
         e->set_max_rows(10);
         e->set_keep_rows(20);
       },
       "table 'user'.eviction.max_rows: got 10, expected at least keep_rows = 20"},
      {[](EvictionSpec* e) { e->set_min_l2_norm(-0.5f); }, "table 'user'.eviction.min_l2_norm: got -0.5"},
      {[](EvictionSpec* e) { e->set_ttl_seconds(-3); },
       "table 'user'.eviction.ttl_seconds: got -3, expected in [0, 1000000000] (0: off)"},
      {[](EvictionSpec* e) { e->set_ttl_seconds(int64_t{1} << 40); },
       "table 'user'.eviction.ttl_seconds: got 1099511627776"},
      {[](EvictionSpec* e) {
         e->set_ttl_updates(5);
         e->set_every_updates(2000000);
       },
       "table 'user'.eviction.every_updates: got 2000000"},
  };
  for (const Case& c : cases) {
    EvictionSpec spec;
    c.edit(&spec);
    absl::StatusOr<std::unique_ptr<EmbeddingTable>> table = EmbeddingTable::Create(Options(spec));
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(table.status().message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace pstrain::server
