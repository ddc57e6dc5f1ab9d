// Delta checkpoints through the store (JobSpec.full_checkpoint_every; server/checkpoint_chain.h):
// a job that writes bases and deltas restores, from any kept step's chain, byte for byte the whole
// checkpoint a job writing only whole checkpoints has at that step; pruning keeps every file a kept
// step needs, for the newest JobSpec.keep_checkpoints steps; a rollback reads the chain and the next cut is a base; a
// broken chain names what still restores; a base and ten deltas restore the whole checkpoint of their cut; and a delta
// is never restored as if it were whole.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <filesystem>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "common/sparse_rows.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/checkpoint_chain.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace store_test;  // NOLINT: the shared helpers of the store tests

constexpr int kDim = 2;

// Two tables under admission count:2 and eviction (TTL 4 updates, at most 12 rows), SYNC with 2
// workers, a checkpoint every 3 steps into `dir`, a base every `full_every` cuts.
ParameterStore::Options Job(const std::string& dir, int full_every) {
  ParameterStore::Options options = MakeOptions(SYNC, 2);
  options.job.set_num_servers(1);
  for (const char* name : {"user", "item"}) {
    TableSpec* t = options.job.add_tables();
    t->set_name(name);
    t->set_dim(kDim);
    t->mutable_optimizer()->set_type(SparseOptimizerSpec::ADAGRAD);
    t->mutable_optimizer()->set_lr(0.5f);
    t->mutable_admission()->set_policy(AdmissionSpec::COUNT);
    t->mutable_admission()->set_min_count(2);
    t->mutable_admission()->set_sketch_bytes(4096);
    t->mutable_eviction()->set_ttl_updates(4);
    t->mutable_eviction()->set_max_rows(12);
    t->mutable_eviction()->set_every_updates(1);
  }
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_steps(3);
  options.job.set_full_checkpoint_every(full_every);
  return options;
}

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "delta-" + name + "-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

SparseRows Rows(int table, const std::vector<uint64_t>& keys) {
  SparseRows entry;
  SetKeys(table, keys, &entry);
  std::vector<float> rows(keys.size() * kDim);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  SetRows(rows, &entry);
  return entry;
}

// Steps [from, to) of a drifting workload: each step's keys move on, so rows are admitted, updated
// and evicted all along.
void Train(ParameterStore& store, int64_t from, int64_t to) {
  for (int64_t step = from; step < to; ++step) {
    const uint64_t a = static_cast<uint64_t>(step), b = static_cast<uint64_t>(step / 2) + 100;
    std::vector<float> dense(25);
    for (int i = 0; i < 25; ++i) dense[i] = 0.01f * static_cast<float>((step + i) % 5);
    PushRequest p0 = MakePush(0, step, 1, dense);
    *p0.add_sparse() = Rows(0, {a, a + 1, b});
    PushRequest p1 = MakePush(1, step, 2, dense);
    *p1.add_sparse() = Rows(0, {a, a + 2});
    *p1.add_sparse() = Rows(1, {b, b + 50});
    for (const PushRequest* push : {&p0, &p1}) {
      const absl::Status status = PushNow(store, *push);
      ASSERT_TRUE(status.ok()) << "step " << step << ": " << status;
    }
  }
}

std::string FileBytes(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(path, "checkpoint");
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.value_or("");
}

// `ckpt` as WriteCheckpoint writes it.
std::string AsFile(const ShardCheckpoint& ckpt, const std::string& dir) {
  const std::string path = dir + "-as-file.ckpt";
  EXPECT_TRUE(WriteCheckpoint(path, ckpt).ok());
  return FileBytes(path);
}

TEST(ParameterStoreDeltaTest, EveryKeptStepsChainIsTheWholeCheckpointOfThatCutByteForByte) {
  const std::string whole_dir = Dir("whole"), delta_dir = Dir("chain");
  auto whole = MakeStore(Job(whole_dir, 0));
  auto chained = MakeStore(Job(delta_dir, 4));
  ASSERT_NO_FATAL_FAILURE(Train(*whole, 0, 40));
  ASSERT_NO_FATAL_FAILURE(Train(*chained, 0, 40));
  EXPECT_GT(whole->TableStats()[0].evicted, 0);
  EXPECT_GT(whole->TableStats()[0].refused, 0);
  // Cuts at 3, 6, ..., 39: a base at 3, 15, 27, 39, deltas between. The newest two steps are kept:
  // 39 (a base) and 36, whose chain goes back to 27.
  EXPECT_THAT(ListCheckpointSteps(whole_dir, 0), ElementsAre(36, 39));
  EXPECT_THAT(ListCheckpointSteps(delta_dir, 0), ElementsAre(27, 30, 33, 36, 39));
  for (int64_t step : {27, 30, 33, 36, 39}) {
    absl::StatusOr<int64_t> base = ReadCheckpointBaseStep(CheckpointPath(delta_dir, 0, step));
    ASSERT_TRUE(base.ok()) << base.status();
    EXPECT_EQ(*base, step % 12 == 3 ? -1 : step - 3) << "step " << step;
  }
  for (int64_t step : {36, 39}) {
    absl::StatusOr<ShardCheckpoint> chain = ReadCheckpointChain(delta_dir, 0, step);
    ASSERT_TRUE(chain.ok()) << chain.status();
    EXPECT_EQ(chain->base_step, -1);
    EXPECT_EQ(AsFile(*chain, delta_dir), FileBytes(CheckpointPath(whole_dir, 0, step))) << "step " << step;
  }
  // A delta holds the few rows that changed: smaller than the whole shard of its step.
  EXPECT_LT(std::filesystem::file_size(CheckpointPath(delta_dir, 0, 36)),
            std::filesystem::file_size(CheckpointPath(whole_dir, 0, 36)));
}

TEST(ParameterStoreDeltaTest, ABaseAndTenDeltasRestoreTheWholeCheckpointOfTheirCutByteForByte) {
  // A base every 11 cuts: the cut of step 33 is the base of step 3 and ten deltas (6, ..., 33),
  // with rows admitted, updated and evicted between every two of them. Restored into a store, the
  // chain gives the same whole checkpoint as the job that wrote only whole ones.
  const std::string whole_dir = Dir("ten-whole"), delta_dir = Dir("ten-chain");
  auto whole = MakeStore(Job(whole_dir, 0));
  auto chained = MakeStore(Job(delta_dir, 11));
  ASSERT_NO_FATAL_FAILURE(Train(*whole, 0, 34));
  ASSERT_NO_FATAL_FAILURE(Train(*chained, 0, 34));
  int64_t step = 33, links = 0;
  while (true) {
    absl::StatusOr<int64_t> base = ReadCheckpointBaseStep(CheckpointPath(delta_dir, 0, step));
    ASSERT_TRUE(base.ok()) << base.status();
    if (*base < 0) break;
    ++links;
    step = *base;
  }
  EXPECT_EQ(step, 3);
  EXPECT_EQ(links, 10);
  absl::StatusOr<ShardCheckpoint> chain = ReadCheckpointChain(delta_dir, 0, 33);
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(AsFile(*chain, delta_dir), FileBytes(CheckpointPath(whole_dir, 0, 33)));
  // And a store restored from it holds what one restored from the whole file holds.
  auto from_chain = MakeStore(Job(Dir("ten-restored-chain"), 0));
  auto from_whole = MakeStore(Job(Dir("ten-restored-whole"), 0));
  ASSERT_TRUE(from_chain->Restore(*chain).ok());
  absl::StatusOr<ShardCheckpoint> whole_file = ReadCheckpoint(CheckpointPath(whole_dir, 0, 33));
  ASSERT_TRUE(whole_file.ok()) << whole_file.status();
  ASSERT_TRUE(from_whole->Restore(*whole_file).ok());
  EXPECT_EQ(from_chain->step(), 33);
  ASSERT_NO_FATAL_FAILURE(Train(*from_chain, 33, 36));
  ASSERT_NO_FATAL_FAILURE(Train(*from_whole, 33, 36));
  absl::StatusOr<ShardCheckpoint> after_chain = from_chain->Checkpoint();
  absl::StatusOr<ShardCheckpoint> after_whole = from_whole->Checkpoint();
  ASSERT_TRUE(after_chain.ok() && after_whole.ok());
  EXPECT_EQ(AsFile(*after_chain, delta_dir + "-after"), AsFile(*after_whole, whole_dir + "-after"))
      << "three more steps from each restore end alike";
}

TEST(ParameterStoreDeltaTest, KeepCheckpointsKeepsThatManyNewestCutsAndTheirChains) {
  // Whole checkpoints: the newest 4 cuts (JobSpec.keep_checkpoints), not the default 2.
  const std::string whole_dir = Dir("keep-whole");
  ParameterStore::Options options = Job(whole_dir, 0);
  options.job.set_keep_checkpoints(4);
  auto whole = MakeStore(options);
  ASSERT_NO_FATAL_FAILURE(Train(*whole, 0, 40));
  EXPECT_THAT(ListCheckpointSteps(whole_dir, 0), ElementsAre(30, 33, 36, 39));
  // A chain (a base every 4 cuts: 3, 15, 27, 39): the newest 6 cuts reach back to 24, whose chain
  // starts at the base of 15.
  const std::string chain_dir = Dir("keep-chain");
  options = Job(chain_dir, 4);
  options.job.set_keep_checkpoints(6);
  auto chained = MakeStore(options);
  ASSERT_NO_FATAL_FAILURE(Train(*chained, 0, 40));
  EXPECT_THAT(ListCheckpointSteps(chain_dir, 0), ElementsAre(15, 18, 21, 24, 27, 30, 33, 36, 39));
}

TEST(ParameterStoreDeltaTest, AStepTheSchedulerMayStillAskForIsKeptWithItsChain) {
  // Options::keep_from (CheckpointAck.keep_from_step): a cut the scheduler chose before the server
  // learnt of it outlives the keep rule (the default 2 newest cuts), with the base it needs; once
  // the scheduler says a newer one, the keep rule prunes again.
  const std::string dir = Dir("keep-from");
  ParameterStore::Options options = Job(dir, 4);  // bases at 3, 15, 27, 39
  auto keep_from = std::make_shared<std::atomic<int64_t>>(0);
  options.keep_from = keep_from;
  auto store = MakeStore(options);
  ASSERT_NO_FATAL_FAILURE(Train(*store, 0, 10));
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(3, 6, 9)) << "0: every file stays";
  keep_from->store(21);
  ASSERT_NO_FATAL_FAILURE(Train(*store, 10, 34));
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(15, 18, 21, 24, 27, 30, 33)) << "21 and its base 15 stay";
  keep_from->store(33);
  ASSERT_NO_FATAL_FAILURE(Train(*store, 34, 37));
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(27, 30, 33, 36)) << "33's chain from 27";
  keep_from->store(std::numeric_limits<int64_t>::max());
  ASSERT_NO_FATAL_FAILURE(Train(*store, 37, 40));
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(27, 30, 33, 36, 39)) << "the keep rule: 36 needs 27";
}

TEST(ParameterStoreDeltaTest, ARollbackReadsTheChainAndTheNextCutIsABase) {
  const std::string dir = Dir("rollback");
  auto store = MakeStore(Job(dir, 4));
  ASSERT_NO_FATAL_FAILURE(Train(*store, 0, 38));
  absl::StatusOr<ShardCheckpoint> at33 = ReadCheckpointChain(dir, 0, 33);
  ASSERT_TRUE(at33.ok()) << at33.status();
  ASSERT_TRUE(store->RestoreAndUpdateMembership(&*at33, 5, {0, 1}).ok());
  EXPECT_EQ(store->step(), 33);
  // The steps after 33 were removed; the chain of 33 stays.
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(27, 30, 33));
  // From 33 again, the same pushes: the next cut (36) is a base, whatever the cadence said before.
  for (int64_t step = 33; step < 37; ++step) {
    PushRequest p0 = MakePush(0, step, 1, std::vector<float>(25, 0.01f));
    PushRequest p1 = MakePush(1, step, 1, std::vector<float>(25, 0.02f));
    p0.set_membership_epoch(5);
    p1.set_membership_epoch(5);
    ASSERT_TRUE(PushNow(*store, p0).ok());
    ASSERT_TRUE(PushNow(*store, p1).ok());
  }
  absl::StatusOr<int64_t> base = ReadCheckpointBaseStep(CheckpointPath(dir, 0, 36));
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ(*base, -1);
}

TEST(ParameterStoreDeltaTest, ABrokenChainIsRefusedNamingTheStepThatStillRestores) {
  const std::string dir = Dir("broken");
  auto store = MakeStore(Job(dir, 4));
  ASSERT_NO_FATAL_FAILURE(Train(*store, 0, 37));  // files 27 (base), 30, 33, 36
  ASSERT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(27, 30, 33, 36));
  // A corrupt delta in the middle.
  const std::string path33 = CheckpointPath(dir, 0, 33);
  const std::string good = FileBytes(path33);
  auto write33 = [&](const std::string& bytes) { ASSERT_TRUE(WriteFileAtomically(path33, "test", bytes).ok()); };
  std::string bytes = good;
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_NO_FATAL_FAILURE(write33(bytes));
  absl::StatusOr<ShardCheckpoint> chain = ReadCheckpointChain(dir, 0, 36);
  EXPECT_EQ(chain.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(chain.status().message(), HasSubstr("checksum mismatch"));
  EXPECT_THAT(chain.status().message(), HasSubstr("the chain restores up to step 30"));
  EXPECT_THAT(chain.status().message(),
              HasSubstr("the chain of step 36 is broken: the delta of step 36 follows step 33"));
  // A gap: the file a delta follows is missing.
  ASSERT_NO_FATAL_FAILURE(write33(good));
  std::filesystem::remove(CheckpointPath(dir, 0, 30));
  chain = ReadCheckpointChain(dir, 0, 33);
  EXPECT_EQ(chain.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(chain.status().message(), HasSubstr("a gap in the chain of step 33"));
  EXPECT_THAT(chain.status().message(), HasSubstr("the chain restores up to step 27"));
  // A step with no file at all is NOT_FOUND, as for a whole checkpoint.
  EXPECT_EQ(ReadCheckpointChain(dir, 0, 42).status().code(), absl::StatusCode::kNotFound);
}

TEST(ParameterStoreDeltaTest, ADeltaIsNotRestoredAsIfItWereWhole) {
  const std::string dir = Dir("not-whole");
  auto store = MakeStore(Job(dir, 4));
  ASSERT_NO_FATAL_FAILURE(Train(*store, 0, 7));  // a base at 3, a delta at 6
  absl::StatusOr<ShardCheckpoint> delta = ReadCheckpoint(CheckpointPath(dir, 0, 6));
  ASSERT_TRUE(delta.ok()) << delta.status();
  ASSERT_EQ(delta->base_step, 3);
  auto fresh = MakeStore(Job(Dir("not-whole-fresh"), 4));
  const absl::Status status = fresh->Restore(*delta);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("it is a delta on step 3"));
  EXPECT_EQ(fresh->step(), 0);
}

}  // namespace
}  // namespace pstrain::server
