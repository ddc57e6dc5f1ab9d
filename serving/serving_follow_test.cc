// Following a job's checkpoints and answering from them (serving/checkpoint_follower.h,
// serving/served_model.h), on two parameter stores trained in process: the follower's cut is byte
// for byte the export of that cut read from scratch, whether it got there by applying deltas or
// by reading chains; a failed poll leaves nothing half-applied; lookups give each key's row or,
// for a key without one (never trained or evicted), its initial value; bad lookups are refused.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/checkpoint_files.h"
#include "common/server_counts.h"
#include "server/checkpoint.h"
#include "server/checkpoint_chain.h"
#include "server/checkpoint_reshard.h"
#include "server/embedding_table.h"
#include "serving/checkpoint_export.h"
#include "serving/checkpoint_follower.h"
#include "serving/served_model.h"
#include "serving/serving_test_util.h"

namespace pstrain::serving {
namespace {

using ::testing::HasSubstr;
using namespace test;  // NOLINT: the serving tests' job

void ExpectSameExport(const ModelExport& a, const ModelExport& b) {
  EXPECT_EQ(a.manifest.step(), b.manifest.step());
  EXPECT_EQ(a.dense.values, b.dense.values);
  ASSERT_EQ(a.tables.size(), b.tables.size());
  for (size_t t = 0; t < a.tables.size(); ++t) {
    EXPECT_EQ(a.tables[t].keys, b.tables[t].keys) << "table " << t;
    EXPECT_EQ(a.stored_values[t], b.stored_values[t]) << "table " << t;
  }
}

// The export of step `step` read from scratch; equal to `got`.
void ExpectExportOfStep(const Servers& s, const ModelExport& got) {
  CheckpointExportOptions options = ExportOptions(s);
  options.step = got.manifest.step();
  absl::StatusOr<ModelExport> fresh = ExportCheckpoints(options);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  SCOPED_TRACE(options.step);
  ExpectSameExport(got, *fresh);
}

TEST(CheckpointFollowerTest, EachCutIsTheExportOfThatCutWhetherByDeltasOrByChains) {
  Servers s = Train("follow", 7, /*ttl_updates=*/2);
  CheckpointFollower follower(ExportOptions(s));
  // The first poll reads each server's chain of step 6 (a base at 2, deltas at 4 and 6).
  absl::StatusOr<std::optional<ModelExport>> first = follower.Poll();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->manifest.step(), 6);
  EXPECT_EQ(follower.chains_read(), 2);
  ExpectExportOfStep(s, **first);
  // Nothing newer: nothing to do.
  absl::StatusOr<std::optional<ModelExport>> same = follower.Poll();
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->has_value());
  // Steps 7..12: cuts at 8 (a base), 10 and 12 (deltas). Polled at 10: the chain of 10 starts at
  // the base of 8, not at the cut held, so each server's chain is read again; at 12 only the delta.
  for (int64_t step = 7; step < 11; ++step) PushStep(&s, step);
  absl::StatusOr<std::optional<ModelExport>> at10 = follower.Poll();
  ASSERT_TRUE(at10.ok() && at10->has_value()) << at10.status();
  EXPECT_EQ(follower.chains_read(), 4);
  ExpectExportOfStep(s, **at10);
  for (int64_t step = 11; step < 13; ++step) PushStep(&s, step);
  absl::StatusOr<std::optional<ModelExport>> at12 = follower.Poll();
  ASSERT_TRUE(at12.ok() && at12->has_value()) << at12.status();
  EXPECT_EQ(follower.chains_read(), 4);
  EXPECT_EQ(follower.deltas_applied(), 2);
  ExpectExportOfStep(s, **at12);
  // Rows left between cuts (ttl 2): the export of 12 lacks keys that were trained.
  EXPECT_LT((*at12)->tables[0].keys.size(), s.keys.size());
}

TEST(CheckpointFollowerTest, AFailedPollHoldsNoCutAndTheNextBaseRestoresIt) {
  Servers s = Train("follow-fail", 7);
  CheckpointFollower follower(ExportOptions(s));
  ASSERT_TRUE(follower.Poll().ok());
  EXPECT_EQ(follower.step(), 6);
  for (int64_t step = 7; step < 9; ++step) PushStep(&s, step);   // a base at 8 on both servers
  for (int64_t step = 9; step < 11; ++step) PushStep(&s, step);  // a delta at 10
  // Server 1's delta of step 10 is corrupt: the poll fails, naming the file.
  const std::string file = server::CheckpointPath(s.dir, 1, 10);
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 7);
  absl::StatusOr<std::optional<ModelExport>> bad = follower.Poll();
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("server-1-step-0000000010.ckpt"));
  EXPECT_EQ(follower.step(), -1) << "a failed poll holds no cut";
  // The servers go on: their cut at 12 is a delta on 10, so with server 1's file of 10 gone its
  // chain has a gap, and the poll says so. The next base (step 14) restores the follower.
  for (int64_t step = 11; step < 13; ++step) PushStep(&s, step);
  std::filesystem::remove(file);
  absl::StatusOr<std::optional<ModelExport>> still = follower.Poll();
  EXPECT_FALSE(still.ok());
  EXPECT_THAT(std::string(still.status().message()), HasSubstr("gap"));
  for (int64_t step = 13; step < 15; ++step) PushStep(&s, step);
  absl::StatusOr<std::optional<ModelExport>> again = follower.Poll();
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ(follower.step(), 14);
  ExpectExportOfStep(s, **again);
}

TEST(CheckpointFollowerTest, ACutOfAnotherServerCountIsReadWithItsOwnCount) {
  // The job went on from step 6 on 3 servers (its manifest now says 3): until a 3-server cut exists,
  // the newest cut is the 2-server one of step 6.
  Servers s = Train("follow-recount", 7);
  absl::StatusOr<ModelExport> two = ExportCheckpoints(ExportOptions(s));
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->manifest.step(), 6);
  ASSERT_TRUE(WriteServerCounts(s.dir, {{0, 2}, {6, 3}}, 0600).ok());
  CheckpointExportOptions options = ExportOptions(s);
  options.job.set_num_servers(3);
  CheckpointFollower follower(options);
  absl::StatusOr<std::optional<ModelExport>> first = follower.Poll();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  ExpectSameExport(**first, *two);

  // The 3-server run's first cut, step 8: the same model re-cut onto 3 servers (as a resumed job
  // restores it), each file whole.
  const ShardMap three = MakeShardMap({Chunk(0, 0, 10, 0), Chunk(0, 10, 10, 1), Chunk(1, 0, 5, 2)});
  for (int r = 0; r < 3; ++r) {
    absl::StatusOr<server::ShardCheckpoint> ckpt = server::ReadResharded(s.dir, 2, 6, three, 3, r);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt->step = 8;
    ASSERT_TRUE(server::WriteCheckpoint(CheckpointPath(s.dir, r, 8), *ckpt).ok());
  }
  absl::StatusOr<std::optional<ModelExport>> next = follower.Poll();
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->manifest.step(), 8);
  EXPECT_EQ((*next)->dense.values, two->dense.values);
  ASSERT_EQ((*next)->tables.size(), two->tables.size());
  EXPECT_EQ((*next)->tables[0].keys, two->tables[0].keys);
  EXPECT_EQ((*next)->stored_values[0], two->stored_values[0]);
  // pstrain-export reads the same cut, and a step by number with the count of its stretch.
  absl::StatusOr<ModelExport> newest = ExportCheckpoints(options);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->manifest.step(), 8);
  options.step = 6;
  absl::StatusOr<ModelExport> old = ExportCheckpoints(options);
  ASSERT_TRUE(old.ok()) << old.status();
  ExpectSameExport(*old, *two);
}

TEST(ServedModelTest, LookupGivesRowsOrInitialValuesAndRefusesUnknownTables) {
  Servers s = Train("served", 7, /*ttl_updates=*/2);
  absl::StatusOr<ModelExport> e = ExportCheckpoints(ExportOptions(s));
  ASSERT_TRUE(e.ok()) << e.status();
  const ModelExport copy = *e;
  absl::StatusOr<std::unique_ptr<const ServedModel>> model = ServedModel::Create(*std::move(e), absl::Now());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->step(), 6);
  // Every key trained, and one never seen.
  std::vector<uint64_t> keys = s.keys;
  keys.push_back(77);
  std::vector<float> values(keys.size() * kDim);
  std::vector<bool> found;
  ASSERT_TRUE((*model)->Lookup("ads", keys, absl::MakeSpan(values), &found).ok());
  const ExportedTable& info = copy.manifest.tables(0);
  int with_rows = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto it = std::lower_bound(copy.tables[0].keys.begin(), copy.tables[0].keys.end(), keys[k]);
    const bool has_row = it != copy.tables[0].keys.end() && *it == keys[k];
    EXPECT_EQ(found[k], has_row) << "key " << keys[k];
    with_rows += has_row;
    for (int j = 0; j < kDim; ++j) {
      const float expected = has_row
                                 ? copy.tables[0].values[(it - copy.tables[0].keys.begin()) * kDim + j]
                                 : server::EmbeddingInitialValue(info.seed(), info.id(), keys[k], j, info.init_bound());
      EXPECT_EQ(values[k * kDim + j], expected) << "key " << keys[k] << " element " << j;
    }
  }
  EXPECT_GT(with_rows, 0);
  EXPECT_LT(with_rows, static_cast<int>(keys.size())) << "evicted and unseen keys read their initial values";
  // Unknown table; a model other than "ctr" has no Predict.
  const absl::Status unknown = (*model)->Lookup("clicks", keys, absl::MakeSpan(values), &found);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("unknown table 'clicks'; the model's tables: ads"));
  EXPECT_EQ((*model)->Predict({"1\t2"}).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pstrain::serving
