// Model exports (serving/model_export.h, serving/checkpoint_export.h): the export of a cut of two
// servers' checkpoints (chains of deltas included) holds exactly the values the servers hold, dense
// and rows, every server's rows together in key order; it reads back as written; and a folder that
// exists, a corrupt rows file or a manifest that points outside its folder is refused.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "common/key_hash.h"
#include "common/sparse_rows.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint_chain.h"
#include "serving/checkpoint_export.h"
#include "serving/model_export.h"
#include "server/store_test_util.h"
#include "serving/serving_test_util.h"

namespace pstrain::serving {
namespace {

using ::testing::HasSubstr;
using namespace server::store_test;  // NOLINT: the shared helpers of the store tests
using namespace test;                // NOLINT: the serving tests' job

TEST(ModelExportTest, TheExportOfACutHoldsWhatEveryServerHoldsDenseAndRows) {
  Servers s = Train("cut");
  absl::StatusOr<int64_t> base = server::ReadCheckpointBaseStep(server::CheckpointPath(s.dir, 0, 6));
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(*base, 4) << "the cut of step 6 is a delta";
  absl::StatusOr<ModelExport> e = ExportCheckpoints(ExportOptions(s));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->manifest.step(), 6);
  // The servers went on to step 7; the export is the cut of step 6, which a store restored from
  // the chain holds. Dense: server 0's weight, then server 1's bias.
  std::vector<float> expected;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<server::ShardCheckpoint> chain = server::ReadCheckpointChain(s.dir, rank, 6);
    ASSERT_TRUE(chain.ok()) << chain.status();
    expected.insert(expected.end(), chain->weights.begin(), chain->weights.end());
  }
  EXPECT_EQ(e->dense.values, expected);
  EXPECT_EQ(e->dense.params.size(), 2u);
  // Rows: every key pushed by step 6, from both servers, in key order, with the values a server
  // restored to step 6 reads for it.
  ASSERT_EQ(e->tables.size(), 1u);
  const ExportedTable& info = e->manifest.tables(0);
  EXPECT_EQ(info.name(), "ads");
  EXPECT_EQ(info.row_dtype(), TableSpec::FP16);
  EXPECT_EQ(e->tables[0].keys, s.keys);  // steps 0-5 already brought every key
  std::map<uint64_t, std::vector<float>> served;
  for (int rank = 0; rank < 2; ++rank) {
    auto restored = MakeStore(Options(rank, Dir("unused")));
    absl::StatusOr<server::ShardCheckpoint> chain = server::ReadCheckpointChain(s.dir, rank, 6);
    ASSERT_TRUE(restored->Restore(*chain).ok());
    for (uint64_t k : s.keys) {
      if (ServerOfKey(k, 2) != rank) continue;
      PullRequest pull = MakePull(0, 6);
      SetKeys(0, {k}, pull.add_sparse());
      pull.set_rows_only(true);
      PullResponse resp;
      Outcome outcome;
      restored->Pull(pull, &resp, outcome.done());
      ASSERT_TRUE(outcome.status.has_value() && outcome.status->ok());
      std::vector<float> row(kDim);
      CopyRows(resp.sparse(0), absl::MakeSpan(row));
      served[k] = row;
    }
  }
  for (size_t i = 0; i < s.keys.size(); ++i) {
    const std::vector<float> row(e->tables[0].values.begin() + i * kDim, e->tables[0].values.begin() + (i + 1) * kDim);
    EXPECT_EQ(row, served[s.keys[i]]) << "key " << s.keys[i];
  }
}

TEST(ModelExportTest, AnExportReadsBackAsWrittenAndIsWrittenOnce) {
  Servers s = Train("roundtrip");
  absl::StatusOr<ModelExport> e = ExportCheckpoints(ExportOptions(s));
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string out = Dir("roundtrip-out");
  ASSERT_TRUE(WriteModelExport(*e, out).ok());
  absl::StatusOr<ModelExport> read = ReadModelExport(out);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->manifest.step(), 6);
  EXPECT_EQ(read->manifest.tables(0).rows(), static_cast<int64_t>(s.keys.size()));
  EXPECT_EQ(read->dense.values, e->dense.values);
  EXPECT_EQ(read->tables[0].keys, e->tables[0].keys);
  EXPECT_EQ(read->stored_values, e->stored_values);
  EXPECT_EQ(read->tables[0].values.size(), s.keys.size() * kDim);
  // Written once: an existing folder is not replaced.
  const absl::Status again = WriteModelExport(*e, out);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
}

TEST(ModelExportTest, ACorruptOrEscapingExportIsRefused) {
  Servers s = Train("bad");
  absl::StatusOr<ModelExport> e = ExportCheckpoints(ExportOptions(s));
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string out = Dir("bad-out");
  ASSERT_TRUE(WriteModelExport(*e, out).ok());
  // A flipped byte in the rows file.
  const std::string rows = out + "/table-0.rows";
  absl::StatusOr<std::string> bytes = ReadWholeFile(rows, "rows");
  ASSERT_TRUE(bytes.ok());
  std::string flipped = *bytes;
  flipped[40] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(rows, "rows", flipped).ok());
  absl::StatusOr<ModelExport> read = ReadModelExport(out);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("table-0.rows': checksum mismatch"));
  ASSERT_TRUE(WriteFileAtomically(rows, "rows", *bytes).ok());
  // A manifest naming a file outside the folder.
  absl::StatusOr<std::string> manifest = ReadWholeFile(out + "/manifest.textproto", "manifest");
  ASSERT_TRUE(manifest.ok());
  std::string escaping = *manifest;
  escaping.replace(escaping.find("dense.model"), 11, "../x.model");
  ASSERT_TRUE(WriteFileAtomically(out + "/manifest.textproto", "manifest", escaping).ok());
  read = ReadModelExport(out);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("expected a file in the folder"));
  // No cut of that step.
  CheckpointExportOptions options = ExportOptions(s);
  options.step = 5;
  EXPECT_EQ(ExportCheckpoints(options).status().code(), absl::StatusCode::kNotFound);
  // Checkpoints of another model.
  options = ExportOptions(s);
  options.params.pop_back();
  const absl::Status other = ExportCheckpoints(options).status();
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  EXPECT_THAT(other.message(), HasSubstr("outside the model's tensors"));
}

}  // namespace
}  // namespace pstrain::serving
