// Re-cutting one table's checkpoints from 2 servers into 3 (server/table_reshard.h): each new
// server's table is, row for row, what a table that held its keys from the start would hold after
// the same updates; its bytes restore into a table; the admission sketch is the old ones' sum;
// tombstones and the ttl clock follow; and bad input is refused with the server named.
#include "server/table_reshard.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/key_hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/embedding_table.h"
#include "server/embedding_table_test_util.h"
#include "server/le_bytes.h"
#include "server/table_format.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;
using namespace table_test;  // NOLINT: the shared helpers of the table tests

constexpr uint64_t kKeys = 600;

TableOptions Base() {
  TableOptions options;
  options.name = "ads";
  options.id = 2;
  options.dim = 4;
  options.seed = 7;
  options.optimizer.type = SparseOptimizerOptions::Type::kAdagrad;
  options.keep_tombstones = true;
  return options;
}

// `servers` tables, table s holding the keys ServerOfKey gives server s, after `updates` updates
// of a random 5% of the keys (the same draws for every count), at time `update` seconds.
std::vector<std::unique_ptr<EmbeddingTable>> Train(const TableOptions& options, int servers, int updates) {
  std::vector<std::unique_ptr<EmbeddingTable>> tables;
  for (int s = 0; s < servers; ++s) tables.push_back(MakeTable(options));
  std::mt19937_64 rng(42);
  for (int64_t update = 1; update <= updates; ++update) {
    std::vector<std::vector<uint64_t>> keys(servers);
    for (uint64_t k = 0; k < kKeys; ++k) {
      if (rng() % 20 == 0) keys[ServerOfKey(k, servers)].push_back(k);
    }
    std::vector<float> grads(kKeys * options.dim);
    for (float& g : grads) g = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 1000.0f;
    for (int s = 0; s < servers; ++s) {
      EmbeddingTable& table = *tables[s];
      table.AdvanceClock(update, update * 1000);
      std::vector<float> mine;  // each key's own gradient, whichever server holds it
      for (uint64_t k : keys[s])
        mine.insert(mine.end(), grads.begin() + k * options.dim, grads.begin() + (k + 1) * options.dim);
      EXPECT_TRUE(table.Apply(keys[s], mine, 0.1f, update).ok());
      table.AfterUpdate(update);
    }
  }
  return tables;
}

std::vector<std::string> AllBytes(const std::vector<std::unique_ptr<EmbeddingTable>>& tables) {
  std::vector<std::string> out;
  for (const auto& t : tables) out.push_back(Bytes(*t));
  return out;
}

std::vector<absl::string_view> Views(const std::vector<std::string>& bytes) {
  return std::vector<absl::string_view>(bytes.begin(), bytes.end());
}

TableBytes Parse(const std::string& bytes) {
  absl::StatusOr<TableBytes> t = ParseTableBytes(bytes, "test");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : TableBytes{};
}

// (key, update) pairs of a tombstone section, sorted.
std::vector<std::pair<uint64_t, int64_t>> Tombstones(absl::string_view section) {
  std::vector<std::pair<uint64_t, int64_t>> out;
  for (size_t at = 0; at < section.size(); at += kTableTombstoneBytes) {
    out.emplace_back(GetBytes<uint64_t>(section.data() + at), GetBytes<int64_t>(section.data() + at + 8));
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Case {
  std::string name;
  TableOptions options;
};

TEST(ReshardTableTest, EachNewServerHoldsWhatATableOfItsKeysWouldHold) {
  std::vector<Case> cases;
  cases.push_back({"plain", Base()});
  Case ttl{"ttl_seconds_fp16", Base()};
  ttl.options.eviction.set_ttl_seconds(3);
  ttl.options.eviction.set_every_updates(1);
  ttl.options.row_dtype = TableSpec::FP16;
  cases.push_back(ttl);
  Case updates{"ttl_updates_lazy_adam", Base()};
  updates.options.optimizer.type = SparseOptimizerOptions::Type::kLazyAdam;
  updates.options.eviction.set_ttl_updates(4);
  updates.options.eviction.set_every_updates(2);
  cases.push_back(updates);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<std::string> two = AllBytes(Train(c.options, 2, 12));
    const std::vector<std::string> three = AllBytes(Train(c.options, 3, 12));
    int64_t rows = 0;
    size_t tombstones = 0;
    for (int r = 0; r < 3; ++r) {
      ReshardCounts counts;
      absl::StatusOr<std::string> got = ReshardTable(Views(two), 3, r, "re-cut", &counts);
      ASSERT_TRUE(got.ok()) << got.status();
      const TableBytes g = Parse(*got), w = Parse(three[r]);
      // The jump hash moves keys only to the new server: every row of server 2 moved, none of the
      // others did.
      EXPECT_EQ(counts.rows, static_cast<int64_t>(g.num_rows));
      EXPECT_EQ(counts.rows_moved, r == 2 ? counts.rows : 0) << "server " << r;
      EXPECT_EQ(counts.bytes_moved, r == 2 ? counts.bytes : 0) << "server " << r;
      EXPECT_EQ(counts.bytes, static_cast<int64_t>(g.rows.size() + g.row_meta.size())) << "server " << r;
      EXPECT_EQ(g.num_rows, w.num_rows) << "server " << r;
      EXPECT_EQ(g.rows, w.rows) << "server " << r;  // keys, values and optimizer state
      EXPECT_EQ(g.row_meta, w.row_meta) << "server " << r;
      EXPECT_EQ(Tombstones(g.tombstones), Tombstones(w.tombstones)) << "server " << r;
      EXPECT_EQ(g.clock, w.clock) << "server " << r;  // every table saw every update's time
      EXPECT_EQ(g.row_dtype, w.row_dtype);
      // The bytes restore into a table of the job.
      std::unique_ptr<EmbeddingTable> table = MakeTable(c.options);
      EXPECT_TRUE(table->Restore(*got).ok());
      EXPECT_EQ(table->num_rows(), static_cast<int64_t>(w.num_rows));
      rows += g.num_rows;
      tombstones += Tombstones(g.tombstones).size();
    }
    // The eviction cases evicted rows: their tombstones were re-cut too.
    if (c.options.eviction.every_updates() > 0) EXPECT_GT(tombstones, 0u);
    EXPECT_EQ(rows, static_cast<int64_t>(Parse(two[0]).num_rows + Parse(two[1]).num_rows));
    EXPECT_GT(rows, 0);
  }
}

TEST(ReshardTableTest, TheAdmissionSketchIsTheSumOfTheOldOnes) {
  TableOptions options = Base();
  options.admission.set_policy(AdmissionSpec::COUNT);
  options.admission.set_min_count(3);
  options.admission.set_sketch_bytes(4096);
  const std::vector<std::string> two = AllBytes(Train(options, 2, 12));
  const TableBytes a = Parse(two[0]), b = Parse(two[1]);
  ASSERT_EQ(a.sketch.size(), 4096u);
  for (int r = 0; r < 3; ++r) {
    absl::StatusOr<std::string> got = ReshardTable(Views(two), 3, r, "re-cut");
    ASSERT_TRUE(got.ok()) << got.status();
    const TableBytes g = Parse(*got);
    ASSERT_EQ(g.sketch.size(), a.sketch.size());
    for (size_t i = 0; i < g.sketch.size(); ++i) {
      const int sum = static_cast<uint8_t>(a.sketch[i]) + static_cast<uint8_t>(b.sketch[i]);
      ASSERT_EQ(static_cast<uint8_t>(g.sketch[i]), std::min(sum, 255)) << "counter " << i;
    }
    std::unique_ptr<EmbeddingTable> table = MakeTable(options);
    EXPECT_TRUE(table->Restore(*got).ok());
  }
}

TEST(ReshardTableTest, GoingBackToTheOldCountGivesTheOldBytes) {
  TableOptions options = Base();
  options.eviction.set_ttl_updates(4);
  options.eviction.set_every_updates(2);
  const std::vector<std::string> two = AllBytes(Train(options, 2, 12));
  std::vector<std::string> three;
  for (int r = 0; r < 3; ++r) three.push_back(*ReshardTable(Views(two), 3, r, "re-cut"));
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<std::string> back = ReshardTable(Views(three), 2, r, "re-cut");
    ASSERT_TRUE(back.ok()) << back.status();
    const TableBytes g = Parse(*back), w = Parse(two[r]);
    EXPECT_EQ(g.rows, w.rows);
    EXPECT_EQ(g.row_meta, w.row_meta);
    EXPECT_EQ(Tombstones(g.tombstones), Tombstones(w.tombstones));
  }
}

TEST(ReshardTableTest, RefusesPartsThatAreNotOneTablesCut) {
  const TableOptions options = Base();
  const std::vector<std::string> two = AllBytes(Train(options, 2, 6));
  EXPECT_TRUE(absl::IsInvalidArgument(ReshardTable({}, 3, 0, "re-cut").status()));

  // The same key on two servers.
  absl::Status twice = ReshardTable({two[0], two[0]}, 1, 0, "re-cut").status();
  EXPECT_TRUE(absl::IsInvalidArgument(twice)) << twice;
  EXPECT_THAT(twice.message(), HasSubstr("has a row on both server 0 and server 1"));

  TableOptions other = options;
  other.name = "users";
  const std::string foreign = Bytes(*Train(other, 1, 2)[0]);
  absl::Status mixed = ReshardTable({two[0], foreign}, 3, 0, "re-cut").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(mixed)) << mixed;
  EXPECT_THAT(mixed.message(), HasSubstr("re-cut: server 1's table is another table: name users, server 0's ads"));

  std::string corrupt = two[1];
  corrupt[corrupt.size() / 2] ^= 0x5a;
  absl::Status bad = ReshardTable({two[0], corrupt}, 3, 0, "re-cut").status();
  EXPECT_TRUE(absl::IsDataLoss(bad)) << bad;
  EXPECT_THAT(bad.message(), HasSubstr("server 1's"));

  TableOptions tracked = options;
  tracked.track_changes = true;
  std::unique_ptr<EmbeddingTable> t = MakeTable(tracked);
  std::string delta;
  t->SerializeDelta(&delta);
  EXPECT_THAT(ReshardTable({two[0], delta}, 3, 0, "re-cut").status().message(), HasSubstr("is a delta"));
}

}  // namespace
}  // namespace pstrain::server
