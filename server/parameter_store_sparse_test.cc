// ParameterStore with embedding tables: sparse pushes and pulls under the SYNC, ASYNC and
// checkpoint rules the dense chunks follow, and every malformed sparse request refused with
// nothing changed.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/key_hash.h"
#include "common/sparse_rows.h"
#include "common/table_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/embedding_table.h"
#include "server/sparse_shard.h"
#include "server/store_test_util.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;
using namespace store_test;  // NOLINT: the shared helpers of the store tests

constexpr int kDim = 2;
constexpr float kTableLr = 0.5f;

// A job with two tables ("user", dim 2; "item", dim 2), both plain SGD at 0.5, over `num_servers`.
ParameterStore::Options SparseOptions(Mode mode, int num_workers, int num_servers = 1, int rank = 0) {
  ParameterStore::Options options = MakeOptions(mode, num_workers);
  options.job.set_num_servers(num_servers);
  options.rank = rank;
  for (const char* name : {"user", "item"}) {
    TableSpec* t = options.job.add_tables();
    t->set_name(name);
    t->set_dim(kDim);
    t->mutable_optimizer()->set_type(SparseOptimizerSpec::SGD);
    t->mutable_optimizer()->set_lr(kTableLr);
  }
  if (num_servers > 1) {
    // The dense chunks all on server 0: these tests are about the rows.
    options.shard_map = MakeShardMap({Chunk(0, 0, 20, 0), Chunk(1, 0, 5, 0)});
  }
  return options;
}

SparseRows Rows(int table, const std::vector<uint64_t>& keys, const std::vector<float>& rows = {}) {
  SparseRows entry;
  SetKeys(table, keys, &entry);
  if (!rows.empty()) SetRows(rows, &entry);
  return entry;
}

// A push of zero dense gradient plus `sparse` rows.
PushRequest SparsePush(int rank, int64_t step, int64_t samples, std::vector<SparseRows> sparse) {
  PushRequest req = MakePush(rank, step, samples, std::vector<float>(25, 0.0f));
  for (SparseRows& s : sparse) *req.add_sparse() = std::move(s);
  return req;
}

// The rows of `keys` of `table`, pulled at `step` (answered at once).
std::vector<float> PullRows(ParameterStore& store, int table, const std::vector<uint64_t>& keys, int64_t step = 0,
                            int rank = 0) {
  PullRequest req = MakePull(rank, step);
  *req.add_sparse() = Rows(table, keys);
  req.set_rows_only(true);
  PullResponse resp;
  Outcome outcome;
  store.Pull(req, &resp, outcome.done());
  EXPECT_TRUE(outcome.status.has_value() && outcome.status->ok()) << outcome.status.value_or(absl::OkStatus());
  EXPECT_EQ(resp.chunks_size(), 0) << "rows_only answers without dense chunks";
  if (resp.sparse_size() != 1) return {};
  EXPECT_EQ(KeysOf(resp.sparse(0)), keys);
  std::vector<float> out(keys.size() * kDim);
  CopyRows(resp.sparse(0), absl::MakeSpan(out));
  return out;
}

// Keys that the key hash gives server `shard` of `n`: the first `count` from 1 up.
std::vector<uint64_t> KeysOfShard(int shard, int n, int count) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; static_cast<int>(keys.size()) < count; ++k) {
    if (ServerOfKey(k, n) == shard) keys.push_back(k);
  }
  return keys;
}

TEST(ParameterStoreSparseTest, SyncSumsRowGradientsPerKeyWeightedBySamples) {
  auto store = MakeStore(SparseOptions(SYNC, 2));
  const std::vector<float> init = PullRows(*store, 0, {3, 5, 9});
  // Worker 0 (3 samples) touches keys 3 and 5; worker 1 (1 sample) keys 5 and 9.
  ASSERT_TRUE(PushNow(*store, SparsePush(1, 0, 1, {Rows(0, {5, 9}, {1, 2, 3, 4})})).ok());
  EXPECT_EQ(PullRows(*store, 0, {3, 5, 9}), init) << "nothing applies before every worker pushed";
  ASSERT_TRUE(PushNow(*store, SparsePush(0, 0, 3, {Rows(0, {3, 5}, {4, 8, 8, 4})})).ok());
  EXPECT_EQ(store->step(), 1);
  const std::vector<float> expected = {init[0] - kTableLr * (0.75f * 4),
                                       init[1] - kTableLr * (0.75f * 8),
                                       init[2] - kTableLr * (0.75f * 8 + 0.25f * 1),
                                       init[3] - kTableLr * (0.75f * 4 + 0.25f * 2),
                                       init[4] - kTableLr * (0.25f * 3),
                                       init[5] - kTableLr * (0.25f * 4)};
  EXPECT_EQ(PullRows(*store, 0, {3, 5, 9}, 1), expected);
  EXPECT_EQ(PullRows(*store, 1, {3}, 1), PullRows(*MakeStore(SparseOptions(SYNC, 2)), 1, {3}))
      << "the other table is untouched";
}

TEST(ParameterStoreSparseTest, SyncResultIsBitwiseTheSameInAnyArrivalOrderAndAsOneWorkerWithTheMean) {
  const std::vector<float> g0 = {0.1f, -0.3f, 0.7f, 1.1f}, g1 = {0.9f, 0.2f, -0.6f, 0.05f};
  auto forward = MakeStore(SparseOptions(SYNC, 2));
  ASSERT_TRUE(PushNow(*forward, SparsePush(0, 0, 1, {Rows(0, {4, 6}, g0)})).ok());
  ASSERT_TRUE(PushNow(*forward, SparsePush(1, 0, 1, {Rows(0, {4, 6}, g1)})).ok());
  auto backward = MakeStore(SparseOptions(SYNC, 2));
  ASSERT_TRUE(PushNow(*backward, SparsePush(1, 0, 1, {Rows(0, {4, 6}, g1)})).ok());
  ASSERT_TRUE(PushNow(*backward, SparsePush(0, 0, 1, {Rows(0, {4, 6}, g0)})).ok());
  std::vector<float> mean(4);
  for (int i = 0; i < 4; ++i) mean[i] = (g0[i] + g1[i]) / 2;
  auto single = MakeStore(SparseOptions(SYNC, 1));
  ASSERT_TRUE(PushNow(*single, SparsePush(0, 0, 2, {Rows(0, {4, 6}, mean)})).ok());
  const std::vector<float> a = PullRows(*forward, 0, {4, 6}, 1);
  EXPECT_EQ(0, std::memcmp(a.data(), PullRows(*backward, 0, {4, 6}, 1).data(), a.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.data(), PullRows(*single, 0, {4, 6}, 1).data(), a.size() * 4));
}

// 30 SYNC steps of two workers' pushes of rows of both tables, to the primary worker 0 first and
// to the replica worker 1 first: a replica takes its primary's pushes in whatever order they reach
// it.
void PushToBothInOppositeOrders(ParameterStore& primary, ParameterStore& replica) {
  for (int64_t step = 0; step < 30; ++step) {
    const uint64_t a = static_cast<uint64_t>(step % 7), b = static_cast<uint64_t>(step * 3 % 11) + 10;
    const PushRequest p0 = SparsePush(0, step, 1, {Rows(0, {a, b}, {0.1f, 0.2f, 0.3f, 0.4f})});
    const PushRequest p1 =
        SparsePush(1, step, 2, {Rows(0, {a, 30 + a}, {0.5f, 0.6f, 0.7f, 0.8f}), Rows(1, {b}, {1, 2})});
    ASSERT_TRUE(PushNow(primary, p0).ok());
    ASSERT_TRUE(PushNow(primary, p1).ok());
    ASSERT_TRUE(PushNow(replica, p1).ok());
    ASSERT_TRUE(PushNow(replica, p0).ok());
  }
}

// A job that checkpoints every 7 steps into a fresh folder (so its tables keep tombstones), and
// the same job for the replica of its shard, which writes no file.
struct CheckpointedPair {
  ParameterStore::Options primary;
  ParameterStore::Options replica;
  std::string dir;
};
CheckpointedPair Checkpointed(ParameterStore::Options options, const std::string& name) {
  CheckpointedPair pair;
  pair.dir = ::testing::TempDir() + "sparse-ckpt-" + name + "-" + std::to_string(getpid());
  options.job.set_checkpoint_dir(pair.dir);
  options.job.set_checkpoint_every_steps(7);
  pair.primary = options;
  options.write_checkpoints = false;
  pair.replica = options;
  return pair;
}

TEST(ParameterStoreSparseTest, APrimaryAndItsReplicaKeepTheSameRowsUnderAdmissionAndEviction) {
  // A replica takes the same pushes as its primary, in whatever order they reach it: both must
  // admit and evict the same rows, with the same metadata, sketch and tombstones (the replica
  // cuts them where its primary writes a checkpoint).
  ParameterStore::Options options = SparseOptions(SYNC, 2);
  for (TableSpec& t : *options.job.mutable_tables()) {
    t.mutable_admission()->set_policy(AdmissionSpec::COUNT);
    t.mutable_admission()->set_min_count(2);
    t.mutable_eviction()->set_ttl_updates(3);
    t.mutable_eviction()->set_max_rows(6);
    t.mutable_eviction()->set_every_updates(2);
  }
  const CheckpointedPair pair = Checkpointed(options, "policies");
  auto primary = MakeStore(pair.primary);
  auto replica = MakeStore(pair.replica);
  PushToBothInOppositeOrders(*primary, *replica);
  const std::vector<TableStats> stats = primary->TableStats();
  EXPECT_GT(stats[0].refused, 0);
  EXPECT_GT(stats[0].evicted, 0);
  EXPECT_LE(stats[0].rows, 6);
  const absl::StatusOr<ShardCheckpoint> a = primary->Checkpoint(), b = replica->Checkpoint();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tables, b->tables);  // rows, the sketch, the rows' eviction clocks, the tombstones
}

// The tombstones in table `id` of a checkpoint of `job` (one that checkpoints, so its tables keep
// them), restored as a server builds the table.
std::vector<Tombstone> TombstonesIn(const JobSpec& job, int id, const std::string& serialized, int64_t step) {
  std::vector<std::unique_ptr<EmbeddingTable>> tables = std::move(MakeJobTables(job)).value();
  const absl::Status restored = tables[id]->Restore(serialized, step);
  EXPECT_TRUE(restored.ok()) << restored;
  return tables[id]->Tombstones();
}

TEST(ParameterStoreSparseTest, ACheckpointRecordsTheTombstonesSinceTheOneBeforeAndTheStoreThenForgetsThem) {
  ParameterStore::Options options = SparseOptions(SYNC, 2);
  for (TableSpec& t : *options.job.mutable_tables()) {
    t.mutable_eviction()->set_ttl_updates(2);
    t.mutable_eviction()->set_every_updates(1);
  }
  const CheckpointedPair pair = Checkpointed(options, "tombstones");
  auto primary = MakeStore(pair.primary);
  auto replica = MakeStore(pair.replica);
  PushToBothInOppositeOrders(*primary, *replica);  // 30 steps: files at steps 21 and 28 remain
  absl::StatusOr<ShardCheckpoint> file = ReadCheckpoint(CheckpointPath(pair.dir, 0, 28));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ShardCheckpoint> now = primary->Checkpoint();
  ASSERT_TRUE(now.ok());
  int64_t recorded = 0, held = 0;
  for (int t = 0; t < 2; ++t) {
    // The file at step 28 (after update 27): the evictions after updates 21 to 27.
    for (const Tombstone& dead : TombstonesIn(pair.primary.job, t, file->tables[t], 28)) {
      EXPECT_GE(dead.update, 21) << "table " << t << " key " << dead.key;
      EXPECT_LE(dead.update, 27) << "table " << t << " key " << dead.key;
      ++recorded;
    }
    // In memory: those since, after updates 28 and 29.
    for (const Tombstone& dead : TombstonesIn(pair.primary.job, t, now->tables[t], 30)) {
      EXPECT_GE(dead.update, 28) << "table " << t << " key " << dead.key;
      ++held;
    }
    EXPECT_EQ(primary->TableStats()[t].tombstones,
              static_cast<int64_t>(TombstonesIn(pair.primary.job, t, now->tables[t], 30).size()));
  }
  EXPECT_GT(recorded, 0);
  EXPECT_GT(held, 0);
  // The replica cut at the same steps without writing a file: it holds the same.
  absl::StatusOr<ShardCheckpoint> copy = replica->Checkpoint();
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->tables, now->tables);
  // A store restored from the file stands just after its cut: the tombstones are the file's only.
  auto restored = MakeStore(pair.replica);
  ASSERT_TRUE(restored->Restore(*file).ok());
  for (const TableStats& t : restored->TableStats()) EXPECT_EQ(t.tombstones, 0) << t.name;
}

TEST(ParameterStoreSparseTest, AJobThatNeverCheckpointsKeepsNoTombstones) {
  ParameterStore::Options options = SparseOptions(SYNC, 2);
  for (TableSpec& t : *options.job.mutable_tables()) {
    t.mutable_eviction()->set_ttl_updates(2);
    t.mutable_eviction()->set_every_updates(1);
  }
  auto primary = MakeStore(options);
  auto replica = MakeStore(options);
  PushToBothInOppositeOrders(*primary, *replica);
  for (const TableStats& t : primary->TableStats()) {
    EXPECT_GT(t.evicted, 0) << t.name;
    EXPECT_EQ(t.tombstones, 0) << t.name;
  }
}

TEST(ParameterStoreSparseTest, AsyncRowsLeaveByTheLeaseTimesOfThePushesNotByTheServersClock) {
  ParameterStore::Options options = SparseOptions(ASYNC, 2);
  for (TableSpec& t : *options.job.mutable_tables()) {
    t.mutable_eviction()->set_ttl_seconds(60);
    t.mutable_eviction()->set_every_updates(1);
  }
  auto store = MakeStore(options);
  constexpr int64_t kT0 = 1'800'000'000'000;  // ms
  auto push = [&](int rank, int64_t lease, int64_t granted, const std::vector<uint64_t>& keys) {
    PushRequest req = SparsePush(rank, 0, 1, {Rows(0, keys, std::vector<float>(keys.size() * kDim, 0.5f))});
    req.set_lease_id(lease);
    req.set_request_id(static_cast<uint64_t>(lease));  // one push a lease: not a retry of the last
    req.set_lease_granted_unix_ms(granted);
    return PushNow(*store, req);
  };
  ASSERT_TRUE(push(0, 1, kT0, {1, 2}).ok());
  ASSERT_TRUE(push(1, 2, kT0 + 30'000, {2, 3}).ok());
  EXPECT_EQ(store->TableStats()[0].rows, 3);
  // A lease time that is not a time changes nothing.
  const absl::Status bad = push(0, 3, -5, {7});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("push from worker 0: lease_granted_unix_ms is -5, expected >= 0 (0: none)"));
  EXPECT_EQ(store->step(), 2);
  // A minute after key 1's update (whatever the time on this machine), it leaves.
  ASSERT_TRUE(push(0, 3, kT0 + 60'000, {4}).ok());
  EXPECT_EQ(store->TableStats()[0].rows, 3);
  EXPECT_EQ(store->TableStats()[0].evicted, 1);
  ASSERT_TRUE(push(1, 4, kT0 + 90'000, {}).ok());
  EXPECT_EQ(store->TableStats()[0].rows, 1);  // keys 2 and 3, last updated at 30 s
  EXPECT_EQ(store->TableStats()[0].evicted, 3);
}

TEST(ParameterStoreSparseTest, APrimaryAndItsReplicaEvictTheSameRowsUnderAMemoryBudget) {
  // No eviction rule, only a budget of the tables' fixed bytes and 8 rows' worth: the store cuts
  // the tables after the updates that pass it, the same rows on both copies.
  ParameterStore::Options options = SparseOptions(SYNC, 2);
  int64_t fixed = 0, row_bytes = 0;
  for (const TableSpec& t : options.job.tables()) {
    fixed += TableBudgetFixedBytes(t);
    row_bytes = std::max(row_bytes, TableBudgetRowBytes(t));
  }
  const int64_t budget = fixed + 8 * row_bytes;
  options.job.set_table_memory_budget(budget);
  options.job.set_checkpoint_dir(::testing::TempDir() + "sparse-ckpt-budget-" + std::to_string(getpid()));
  auto primary = MakeStore(options);  // checkpoints asked only (none here): every tombstone kept
  auto replica = MakeStore(options);
  PushToBothInOppositeOrders(*primary, *replica);
  int64_t counted = 0, evicted = 0;
  const std::vector<TableStats> stats = primary->TableStats();
  for (size_t t = 0; t < stats.size(); ++t) {
    const TableSpec& spec = options.job.tables(static_cast<int>(t));
    counted += TableBudgetFixedBytes(spec) + stats[t].rows * TableBudgetRowBytes(spec);
    evicted += stats[t].evicted;
    EXPECT_EQ(stats[t].tombstones, stats[t].evicted);
  }
  EXPECT_GT(evicted, 0);
  EXPECT_LE(counted, budget);
  const absl::StatusOr<ShardCheckpoint> a = primary->Checkpoint(), b = replica->Checkpoint();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tables, b->tables);
}

TEST(ParameterStoreSparseTest, AsyncAppliesOnArrivalAndALeasedBatchOnce) {
  auto store = MakeStore(SparseOptions(ASYNC, 2));
  const std::vector<float> init = PullRows(*store, 1, {7});
  PushRequest push = SparsePush(0, 0, 4, {Rows(1, {7}, {2, -2})});
  push.set_lease_id(3);
  push.set_lease_batch(0);
  ASSERT_TRUE(PushNow(*store, push).ok());
  const std::vector<float> once = {init[0] - kTableLr * 2, init[1] + kTableLr * 2};
  EXPECT_EQ(PullRows(*store, 1, {7}), once);
  // The same batch from the worker that inherited the lease: OK, not applied again.
  push.set_worker_rank(1);
  push.set_request_id(99);
  ASSERT_TRUE(PushNow(*store, push).ok());
  EXPECT_EQ(PullRows(*store, 1, {7}), once);
}

TEST(ParameterStoreSparseTest, PushPullAnswersTheNextBatchsRowsAfterTheUpdate) {
  auto store = MakeStore(SparseOptions(SYNC, 1));
  const std::vector<float> init = PullRows(*store, 0, {2, 8});
  PushRequest push = SparsePush(0, 0, 1, {Rows(0, {2}, {1, 1})});
  *push.add_pull_sparse() = Rows(0, {2, 8});
  PullResponse resp;
  Outcome outcome;
  store->PushPull(push, &resp, outcome.done());
  ASSERT_TRUE(outcome.status.has_value() && outcome.status->ok());
  EXPECT_EQ(resp.step(), 1);
  EXPECT_EQ(resp.chunks_size(), 2) << "the dense weights come too";
  ASSERT_EQ(resp.sparse_size(), 1);
  std::vector<float> rows(4);
  CopyRows(resp.sparse(0), absl::MakeSpan(rows));
  EXPECT_EQ(rows, (std::vector<float>{init[0] - kTableLr, init[1] - kTableLr, init[2], init[3]}));
}

// A worker computing a SYNC step again after a membership change pulls rows for the step this
// server already applied: it gets them as that step's first try did (server/rows_before_update.h).
TEST(ParameterStoreSparseTest, SyncPullForTheStepJustAppliedReadsItsRowsAsTheyWereBeforeIt) {
  auto store = MakeStore(SparseOptions(SYNC, 1));
  const std::vector<float> init = PullRows(*store, 0, {2, 8});
  ASSERT_TRUE(PushNow(*store, SparsePush(0, 0, 1, {Rows(0, {2}, {1, 1})})).ok());
  ASSERT_EQ(store->step(), 1);
  const std::vector<float> after_0 = {init[0] - kTableLr, init[1] - kTableLr, init[2], init[3]};
  EXPECT_EQ(PullRows(*store, 0, {2, 8}, /*step=*/1), after_0);
  EXPECT_EQ(PullRows(*store, 0, {2, 8}, /*step=*/0), init) << "step 0's rows, before its update";
  ASSERT_TRUE(PushNow(*store, SparsePush(0, 1, 1, {Rows(0, {8}, {2, 2})})).ok());
  const std::vector<float> after_1 = {after_0[0], after_0[1], init[2] - 2 * kTableLr, init[3] - 2 * kTableLr};
  EXPECT_EQ(PullRows(*store, 0, {2, 8}, /*step=*/2), after_1);
  // Step 1 changed key 8 only: key 2 reads as now, key 8 as before step 1.
  EXPECT_EQ(PullRows(*store, 0, {2, 8}, /*step=*/1), after_0);
  // Older steps are not kept: they read as now.
  EXPECT_EQ(PullRows(*store, 0, {2, 8}, /*step=*/0), after_1);
}

TEST(ParameterStoreSparseTest, ReadingRowsCreatesNoneAndStatsCountWrittenRows) {
  auto store = MakeStore(SparseOptions(ASYNC, 1));
  PullRows(*store, 0, {1, 2, 3});
  EXPECT_EQ(store->TableStats()[0].rows, 0);
  ASSERT_TRUE(PushNow(*store, SparsePush(0, 0, 1, {Rows(0, {1, 2}, {1, 1, 1, 1})})).ok());
  const std::vector<server::TableStats> stats = store->TableStats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, "user");
  EXPECT_EQ(stats[0].rows, 2);
  EXPECT_EQ(stats[1].rows, 0);
  EXPECT_EQ(stats[0].floor_bytes_per_row, kDim * 4);  // SGD keeps no state
  EXPECT_GT(stats[0].bytes_used, 2 * kDim * 4);
}

// Each malformed sparse push is INVALID_ARGUMENT naming the problem, and changes nothing: the
// other worker's stored push and the rows stay as they were, and the step completes afterwards.
TEST(ParameterStoreSparseTest, BadSparsePushesAreRefusedAndChangeNothing) {
  const std::vector<uint64_t> mine = KeysOfShard(0, 2, 2), theirs = KeysOfShard(1, 2, 1);
  struct Case {
    std::string name;
    PushRequest push;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({"foreign key", SparsePush(1, 0, 1, {Rows(0, {mine[0], theirs[0]}, {1, 1, 1, 1})}),
                   "belongs to shard 1, not to shard 0"});
  cases.push_back({"unsorted", SparsePush(1, 0, 1, {Rows(0, {mine[1], mine[0]}, {1, 1, 1, 1})}), "sorted ascending"});
  cases.push_back({"repeated", SparsePush(1, 0, 1, {Rows(0, {mine[0], mine[0]}, {1, 1, 1, 1})}), "repeats the key"});
  cases.push_back({"row size", SparsePush(1, 0, 1, {Rows(0, {mine[0]}, {1, 1, 1})}), "expected 1 keys x dim 2"});
  cases.push_back({"nan", SparsePush(1, 0, 1, {Rows(0, {mine[0]}, {1, std::nanf("")})}), "expected finite values"});
  cases.push_back({"unknown table", SparsePush(1, 0, 1, {Rows(5, {mine[0]}, {1, 1})}), "names table 5"});
  cases.push_back(
      {"table twice", SparsePush(1, 0, 1, {Rows(0, {mine[0]}, {1, 1}), Rows(0, {mine[1]}, {1, 1})}), "appears twice"});
  PushRequest ragged = SparsePush(1, 0, 1, {Rows(0, {mine[0]}, {1, 1})});
  ragged.mutable_sparse(0)->mutable_keys()->push_back('x');
  cases.push_back({"ragged keys", ragged, "multiple of 8"});
  PushRequest partial = SparsePush(1, 0, 1, {Rows(0, {mine[0]}, {1, 1})});
  partial.set_partial(true);
  cases.push_back({"partial", partial, "whole pushes only"});
  PushRequest pull_rows = SparsePush(1, 0, 1, {});
  *pull_rows.add_pull_sparse() = Rows(0, {mine[0]}, {1, 1});
  cases.push_back({"rows in pull_sparse", pull_rows, "expected none"});

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto store = MakeStore(SparseOptions(SYNC, 2, /*num_servers=*/2));
    const std::vector<float> before = PullRows(*store, 0, mine);
    ASSERT_TRUE(PushNow(*store, SparsePush(0, 0, 1, {Rows(0, {mine[0]}, {2, 2})})).ok());
    const absl::Status status = PushNow(*store, c.push);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
    EXPECT_EQ(store->step(), 0);
    EXPECT_EQ(PullRows(*store, 0, mine), before);
    ASSERT_TRUE(PushNow(*store, SparsePush(1, 0, 1, {})).ok());
    EXPECT_EQ(store->step(), 1);
    EXPECT_EQ(PullRows(*store, 0, {mine[0]}, 1),
              (std::vector<float>{before[0] - kTableLr * 0.5f * 2, before[1] - kTableLr * 0.5f * 2}));
  }
}

TEST(ParameterStoreSparseTest, BadSparsePullsAreRefused) {
  auto store = MakeStore(SparseOptions(SYNC, 1, /*num_servers=*/2));
  PullRequest req = MakePull(0, 0);
  *req.add_sparse() = Rows(0, {KeysOfShard(1, 2, 1)[0]});
  PullResponse resp;
  Outcome outcome;
  store->Pull(req, &resp, outcome.done());
  ASSERT_TRUE(outcome.status.has_value());
  EXPECT_EQ(outcome.status->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outcome.status->message(), HasSubstr("pull from worker 0: table 'user' (id 0): key"));
}

// The raw transport's form: rows as views cut anywhere (unaligned, a float split between runs)
// are applied as the same push in protobuf form, a NaN split between runs is still refused, and
// an answer's keys and rows land in one pooled buffer.
TEST(ParameterStoreSparseTest, RawViewsCutAnywhereActLikeTheProtobufForm) {
  const std::vector<uint64_t> keys = {2, 3, 8};
  const std::vector<float> grads = {0.5f, -1, 2, 0.25f, 3, -4};
  const PushRequest proto = SparsePush(0, 0, 1, {Rows(1, keys, grads)});
  auto reference = MakeStore(SparseOptions(ASYNC, 1));
  ASSERT_TRUE(PushNow(*reference, proto).ok());

  // The received bytes, one byte off alignment and cut every 5 bytes.
  const std::string key_bytes = "x" + proto.sparse(0).keys();
  const std::string row_bytes = "x" + proto.sparse(0).rows();
  auto cut = [](absl::string_view bytes) {
    PayloadView view;
    for (size_t at = 1; at < bytes.size(); at += 5) view.Append(bytes.substr(at, 5));
    return view;
  };
  std::vector<IncomingRows> sparse(1);
  sparse[0].table_id = 1;
  sparse[0].keys = cut(key_bytes);
  sparse[0].rows = cut(row_bytes);
  PushRequest header = proto;
  header.clear_sparse();
  std::vector<PayloadView> values;
  for (const TensorChunk& c : header.chunks()) values.emplace_back(c.data());
  auto raw = MakeStore(SparseOptions(ASYNC, 1));
  PushResponse pushed;
  Outcome push_outcome;
  raw->Push(DecodedPush{header, values, sparse, {}}, &pushed, push_outcome.done());
  ASSERT_TRUE(push_outcome.status.has_value() && push_outcome.status->ok()) << *push_outcome.status;
  EXPECT_EQ(PullRows(*raw, 1, keys), PullRows(*reference, 1, keys));

  PullRequest pull = MakePull(0, 0);
  pull.set_rows_only(true);
  std::vector<IncomingRows> ask(1);
  ask[0].table_id = 1;
  ask[0].keys = cut(key_bytes);
  PullResponse resp;
  OutgoingRowsAnswer rows;
  Outcome pull_outcome;
  raw->Pull(DecodedPull{pull, ask}, PullAnswer{&resp, nullptr, &rows}, pull_outcome.done());
  ASSERT_TRUE(pull_outcome.status.has_value() && pull_outcome.status->ok());
  EXPECT_EQ(resp.sparse_size(), 0);
  ASSERT_EQ(rows.entries.size(), 1u);
  const OutgoingRowsAnswer::Entry& e = rows.entries[0];
  EXPECT_EQ(e.table_id, 1);
  EXPECT_EQ(std::string(rows.bytes.data() + e.keys_offset, e.keys_size), proto.sparse(0).keys());
  const std::vector<float> expected = PullRows(*reference, 1, keys);
  ASSERT_EQ(e.rows_size, expected.size() * 4);
  EXPECT_EQ(0, std::memcmp(rows.bytes.data() + e.rows_offset, expected.data(), e.rows_size));

  std::vector<float> bad = grads;
  bad[3] = std::nanf("");
  const std::string bad_bytes = "x" + std::string(reinterpret_cast<const char*>(bad.data()), 4 * bad.size());
  sparse[0].rows = cut(bad_bytes);  // the NaN's bytes straddle two runs
  Outcome refused;
  raw->Push(DecodedPush{header, values, sparse, {}}, &pushed, refused.done());
  ASSERT_TRUE(refused.status.has_value());
  EXPECT_EQ(refused.status->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status->message(),
              HasSubstr("table 'item' (id 1): gradient of key 3 (position 1) element 1 is nan, expected finite"));
  EXPECT_EQ(PullRows(*raw, 1, keys), PullRows(*reference, 1, keys));
}

TEST(ParameterStoreSparseTest, CheckpointsCarryTheRowsThroughAFileAndRestoreThem) {
  ParameterStore::Options options = SparseOptions(ASYNC, 1);
  auto store = MakeStore(options);
  ASSERT_TRUE(PushNow(*store, SparsePush(0, 0, 1, {Rows(0, {1, 4}, {1, 2, 3, 4}), Rows(1, {9}, {5, 6})})).ok());
  absl::StatusOr<ShardCheckpoint> ckpt = store->Checkpoint();
  ASSERT_TRUE(ckpt.ok());
  ASSERT_EQ(ckpt->tables.size(), 2u);
  const std::string path = ::testing::TempDir() + "/sparse.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path, *ckpt).ok());
  absl::StatusOr<ShardCheckpoint> read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->tables, ckpt->tables);

  auto restored = MakeStore(options);
  ASSERT_TRUE(restored->Restore(*read).ok());
  EXPECT_EQ(restored->step(), 1);
  EXPECT_EQ(PullRows(*restored, 0, {1, 4}), PullRows(*store, 0, {1, 4}));
  EXPECT_EQ(PullRows(*restored, 1, {9}), PullRows(*store, 1, {9}));
  EXPECT_EQ(restored->TableStats()[0].rows, 2);

  // A checkpoint of a job without these tables does not fit, and changes nothing.
  ShardCheckpoint dense_only = *ckpt;
  dense_only.tables.clear();
  const absl::Status status = restored->Restore(dense_only);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("holds 0 embedding tables, the job has 2"));
  EXPECT_EQ(restored->TableStats()[0].rows, 2);
  // A corrupt table: DATA_LOSS naming it, nothing changed.
  ShardCheckpoint corrupt = *ckpt;
  corrupt.tables[1][20] ^= 1;
  EXPECT_THAT(restored->Restore(corrupt).message(), HasSubstr("embedding table 'item'"));
  EXPECT_EQ(PullRows(*restored, 1, {9}), PullRows(*store, 1, {9}));
}

TEST(ParameterStoreSparseTest, RollbackToTheStartForgetsEveryRow) {
  ParameterStore::Options options = SparseOptions(SYNC, 1);
  options.job.set_checkpoint_dir(::testing::TempDir() + "/sparse-rollback");
  options.job.set_checkpoint_every_steps(100);
  auto store = MakeStore(options);
  const std::vector<float> init = PullRows(*store, 0, {3});
  ASSERT_TRUE(PushNow(*store, SparsePush(0, 0, 1, {Rows(0, {3}, {1, 1})})).ok());
  ASSERT_NE(PullRows(*store, 0, {3}, 1), init);
  ASSERT_TRUE(store->RestoreAndUpdateMembership(nullptr, 5, {0}).ok());
  EXPECT_EQ(store->TableStats()[0].rows, 0);
}

}  // namespace
}  // namespace pstrain::server
