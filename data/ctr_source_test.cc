#include "data/ctr_source.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "data/ctr_generator.h"
#include "data/text_reader_test_util.h"

namespace pstrain {
namespace data {
namespace {

constexpr CtrSource::Options kCriteo{DataFormat::kCriteo, BadRecords::kFail};
constexpr CtrSource::Options kLibsvm{DataFormat::kLibsvm, BadRecords::kFail};

// A Criteo line for record `i`: label i % 2, I1 = i, I2..I13 = 2, C1 = i as hex, C2..C26 = "a1".
std::string CriteoLine(int i) {
  std::vector<std::string> fields = {absl::StrCat(i % 2), absl::StrCat(i)};
  for (int d = 1; d < kCriteoDense; ++d) fields.push_back("2");
  fields.push_back(absl::StrFormat("%x", i));
  for (int f = 1; f < kCriteoCategorical; ++f) fields.push_back("a1");
  return absl::StrJoin(fields, "\t");
}

// A Criteo file of records 0 .. n-1 (CriteoLine); its path.
std::string WriteCriteo(const std::string& name, int n, bool gzip = false) {
  std::string text;
  for (int i = 0; i < n; ++i) absl::StrAppend(&text, CriteoLine(i), "\n");
  return WriteFile(name, text, gzip);
}

std::unique_ptr<CtrSource> OpenOrDie(const std::string& path, CtrSource::Options options = kCriteo) {
  absl::StatusOr<std::unique_ptr<CtrSource>> source = CtrSource::Open(path, options);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? std::move(*source) : nullptr;
}

// The record numbers in a batch of WriteCriteo records: I1 undone from its LogTransform.
std::vector<int> Records(const CtrBatch& batch) {
  std::vector<int> records;
  for (int64_t i = 0; i < batch.size; ++i) {
    records.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[i * kCriteoDense]))));
  }
  return records;
}

std::vector<int> Iota(int first, int count) {
  std::vector<int> v;
  for (int i = first; i < first + count; ++i) v.push_back(i);
  return v;
}

// Checks the shape every batch must have, whatever its contents.
void ExpectWellFormed(const CtrBatch& batch) {
  EXPECT_EQ(static_cast<int64_t>(batch.labels.size()), batch.size);
  EXPECT_EQ(static_cast<int64_t>(batch.dense.size()), batch.size * batch.num_dense);
  ASSERT_EQ(batch.offsets.size(), batch.keys.size());
  ASSERT_EQ(batch.weights.size(), batch.keys.size());
  for (int f = 0; f < batch.num_fields(); ++f) {
    ASSERT_EQ(static_cast<int64_t>(batch.offsets[f].size()), batch.size + 1) << "field " << f;
    EXPECT_EQ(batch.offsets[f].front(), 0);
    EXPECT_EQ(batch.offsets[f].back(), static_cast<int64_t>(batch.keys[f].size()));
    EXPECT_TRUE(batch.weights[f].empty() || batch.weights[f].size() == batch.keys[f].size());
  }
}

class CtrSourceGzipTest : public testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(PlainAndGzip, CtrSourceGzipTest, testing::Bool());

TEST_P(CtrSourceGzipTest, CriteoBatchHoldsTransformedDenseAndOneKeyPerField) {
  std::vector<std::string> first(40, "");
  first[0] = "1";
  first[1] = "3";          // I1
  first[2] = "-5";         // I2: negative, clamped by LogTransform
  first[14] = "68FD1E64";  // C1; I3..I13 and C2..C26 missing
  std::vector<std::string> second(40, "0");
  for (int f = 0; f < kCriteoCategorical; ++f) second[14 + f] = absl::StrFormat("%x", f + 1);
  const std::string path =
      WriteFile(GetParam() ? "criteo.tsv.gz" : "criteo.tsv",
                absl::StrJoin(first, "\t") + "\n" + absl::StrJoin(second, "\t") + "\n", GetParam());
  CtrBatch batch;
  ASSERT_TRUE(OpenOrDie(path)->ReadBatch(0, 10, &batch).ok());
  ExpectWellFormed(batch);
  ASSERT_EQ(batch.size, 2);
  EXPECT_EQ(batch.num_dense, kCriteoDense);
  ASSERT_EQ(batch.num_fields(), kCriteoCategorical);
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0}));

  std::vector<float> dense(2 * kCriteoDense, 0.0f);
  dense[0] = std::log1p(3.0f);
  EXPECT_EQ(batch.dense, dense);

  EXPECT_EQ(batch.keys[0], (std::vector<uint64_t>{CriteoKey(0, 0x68fd1e64u), CriteoKey(0, 1)}));
  for (int f = 1; f < kCriteoCategorical; ++f) {
    EXPECT_EQ(batch.keys[f], (std::vector<uint64_t>{CriteoMissingKey(f), CriteoKey(f, f + 1)})) << "field " << f;
    EXPECT_EQ(batch.offsets[f], (std::vector<int64_t>{0, 1, 2}));
    EXPECT_TRUE(batch.weights[f].empty());
  }
}

TEST_P(CtrSourceGzipTest, LibsvmBatchHoldsIndicesWithValuesAsWeights) {
  const std::string path = WriteFile(GetParam() ? "train.svm.gz" : "train.svm",
                                     "+1 7:0.5 3:2\n"
                                     "# a comment line: a record, but no sample\n"
                                     "-1\n"
                                     "0.5 qid:4 9:1 9:-3 # trailing comment\n"
                                     "0 18446744073709551615:1\n",
                                     GetParam());
  CtrBatch batch;
  ASSERT_TRUE(OpenOrDie(path, kLibsvm)->ReadBatch(0, 5, &batch).ok());
  ExpectWellFormed(batch);
  ASSERT_EQ(batch.size, 4);
  EXPECT_EQ(batch.num_dense, 0);
  EXPECT_TRUE(batch.dense.empty());
  ASSERT_EQ(batch.num_fields(), 1);
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0, 1, 0}));
  EXPECT_EQ(batch.keys[0], (std::vector<uint64_t>{7, 3, 9, 9, 18446744073709551615ull}));
  EXPECT_EQ(batch.weights[0], (std::vector<float>{0.5f, 2, 1, -3, 1}));
  EXPECT_EQ(batch.offsets[0], (std::vector<int64_t>{0, 2, 2, 4, 5}));
}

TEST_P(CtrSourceGzipTest, RangesThatTileTheFileCoverEveryRecordOnceInOnePass) {
  constexpr int kRecords = 103;
  const std::string path = WriteCriteo(GetParam() ? "tile.tsv.gz" : "tile.tsv", kRecords, GetParam());
  for (const int slice : {1, 7, 10, 103, 500}) {
    std::unique_ptr<CtrSource> source = OpenOrDie(path);
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<int> seen;
      CtrBatch batch;
      for (int first = 0; first < kRecords; first += slice) {
        ASSERT_TRUE(source->ReadBatch(first, slice, &batch).ok());
        ExpectWellFormed(batch);
        for (const int r : Records(batch)) seen.push_back(r);
      }
      EXPECT_EQ(seen, Iota(0, kRecords)) << "slice " << slice << " epoch " << epoch;
      // Only the return to record 0 at the start of the second epoch reopens the file.
      EXPECT_EQ(source->reopens(), epoch) << "slice " << slice;
    }
  }
}

TEST(CtrSourceTest, LaterRangesSkipForwardWithoutReopening) {
  const std::string path = WriteCriteo("forward.tsv", 100);
  std::unique_ptr<CtrSource> source = OpenOrDie(path);
  CtrBatch batch;
  ASSERT_TRUE(source->ReadBatch(0, 2, &batch).ok());
  EXPECT_EQ(Records(batch), Iota(0, 2));
  ASSERT_TRUE(source->ReadBatch(10, 3, &batch).ok());
  EXPECT_EQ(Records(batch), Iota(10, 3));
  ASSERT_TRUE(source->ReadBatch(13, 4, &batch).ok());  // Right where the last one ended.
  EXPECT_EQ(Records(batch), Iota(13, 4));
  ASSERT_TRUE(source->ReadBatch(50, 5, &batch).ok());
  EXPECT_EQ(Records(batch), Iota(50, 5));
  EXPECT_EQ(source->position(), 55);
  EXPECT_EQ(source->reopens(), 0);
}

TEST(CtrSourceTest, GoingBackReopensAndGivesTheSameRecords) {
  const std::string path = WriteCriteo("back.tsv.gz", 100, /*gzip=*/true);
  std::unique_ptr<CtrSource> source = OpenOrDie(path);
  CtrBatch before, after;
  ASSERT_TRUE(source->ReadBatch(10, 5, &before).ok());
  ASSERT_TRUE(source->ReadBatch(60, 5, &after).ok());
  ASSERT_TRUE(source->ReadBatch(10, 5, &after).ok());
  EXPECT_EQ(source->reopens(), 1);
  EXPECT_EQ(Records(after), Iota(10, 5));
  EXPECT_EQ(after.labels, before.labels);
  EXPECT_EQ(after.dense, before.dense);
  EXPECT_EQ(after.keys, before.keys);
  // Overlapping the last range also goes back.
  ASSERT_TRUE(source->ReadBatch(12, 5, &after).ok());
  EXPECT_EQ(Records(after), Iota(12, 5));
  EXPECT_EQ(source->reopens(), 2);
}

TEST(CtrSourceTest, RangePastTheEndIsEmptyAndAStraddlingOneIsClipped) {
  const std::string path = WriteCriteo("end.tsv", 10);
  std::unique_ptr<CtrSource> source = OpenOrDie(path);
  CtrBatch batch;
  ASSERT_TRUE(source->ReadBatch(8, 100, &batch).ok());
  EXPECT_EQ(Records(batch), Iota(8, 2));
  ASSERT_TRUE(source->ReadBatch(1000, 10, &batch).ok());
  ExpectWellFormed(batch);
  EXPECT_EQ(batch.size, 0);
  EXPECT_EQ(batch.num_fields(), kCriteoCategorical);
  ASSERT_TRUE(source->ReadBatch(10, 0, &batch).ok());
  EXPECT_EQ(batch.size, 0);
  // Back to the start after hitting the end: a new epoch.
  ASSERT_TRUE(source->ReadBatch(0, 3, &batch).ok());
  EXPECT_EQ(Records(batch), Iota(0, 3));
}

TEST(CtrSourceTest, BadRangeIsInvalidArgument) {
  std::unique_ptr<CtrSource> source = OpenOrDie(WriteCriteo("range.tsv", 3));
  CtrBatch batch;
  EXPECT_EQ(source->ReadBatch(-1, 2, &batch).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source->ReadBatch(0, -2, &batch).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source->ReadBatch(2, INT64_MAX, &batch).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(source->ReadBatch(0, INT64_MAX, &batch).ok());
  EXPECT_EQ(Records(batch), Iota(0, 3));
}

// Records 0..5 with record 3 (line 4) cut short.
std::string WriteWithBadLine(const std::string& name) {
  std::string text;
  for (int i = 0; i < 6; ++i) {
    absl::StrAppend(&text, i == 3 ? "1\t2\t3" : CriteoLine(i), "\n");
  }
  return WriteFile(name, text);
}

TEST(CtrSourceTest, BadLineFailsNamingFileAndLineAndLeavesAnEmptyBatch) {
  const std::string path = WriteWithBadLine("bad_fail.tsv");
  std::unique_ptr<CtrSource> source = OpenOrDie(path);
  CtrBatch batch;
  ASSERT_TRUE(source->ReadBatch(0, 3, &batch).ok());  // The bad line is not in this range.
  EXPECT_EQ(Records(batch), Iota(0, 3));

  const absl::Status status = source->ReadBatch(2, 3, &batch);
  ASSERT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(status.message(), path + ":4: 3 fields, expected 40")) << status;
  ExpectWellFormed(batch);
  EXPECT_EQ(batch.size, 0);  // Record 2 was read before the error, but is not handed out.

  ASSERT_TRUE(source->ReadBatch(4, 2, &batch).ok());  // The rest of the file still reads.
  EXPECT_EQ(Records(batch), Iota(4, 2));
  EXPECT_EQ(source->skipped(), 0);
}

TEST(CtrSourceTest, BadLinesSkippedAreCounted) {
  const std::string path = WriteWithBadLine("bad_skip.tsv");
  std::unique_ptr<CtrSource> source = OpenOrDie(path, {DataFormat::kCriteo, BadRecords::kSkip});
  CtrBatch batch;
  ASSERT_TRUE(source->ReadBatch(0, 6, &batch).ok());
  ExpectWellFormed(batch);
  EXPECT_EQ(Records(batch), (std::vector<int>{0, 1, 2, 4, 5}));
  EXPECT_EQ(source->skipped(), 1);
}

TEST(CtrSourceTest, BadLibsvmLineFailsOrIsSkipped) {
  const std::string path = WriteFile("bad.svm", "1 1:1\n1 2:x\n0 3:1\n");
  CtrBatch batch;
  const absl::Status status = OpenOrDie(path, kLibsvm)->ReadBatch(0, 3, &batch);
  ASSERT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(status.message(), path + ":2: feature 1 '2:x', expected")) << status;
  EXPECT_EQ(batch.size, 0);

  std::unique_ptr<CtrSource> skipping = OpenOrDie(path, {DataFormat::kLibsvm, BadRecords::kSkip});
  ASSERT_TRUE(skipping->ReadBatch(0, 3, &batch).ok());
  EXPECT_EQ(batch.keys[0], (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(skipping->skipped(), 1);
}

TEST(CtrSourceTest, MissingFileIsNotFound) {
  const std::string path = testing::TempDir() + "/no_such.tsv";
  const absl::StatusOr<std::unique_ptr<CtrSource>> source = CtrSource::Open(path, kCriteo);
  ASSERT_EQ(source.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(source.status().message(), path)) << source.status();
}

TEST(CtrSourceTest, ReusedBatchKeepsItsBuffersAndChangesShapeWithTheFormat) {
  std::unique_ptr<CtrSource> source = OpenOrDie(WriteCriteo("reuse.tsv", 64));
  CtrBatch batch;
  ASSERT_TRUE(source->ReadBatch(0, 32, &batch).ok());
  const uint64_t* keys = batch.keys[5].data();
  const float* dense = batch.dense.data();
  ASSERT_TRUE(source->ReadBatch(32, 32, &batch).ok());
  EXPECT_EQ(Records(batch), Iota(32, 32));
  EXPECT_EQ(batch.keys[5].data(), keys);
  EXPECT_EQ(batch.dense.data(), dense);

  const std::string svm = WriteFile("reuse.svm", "1 4:2\n");
  ASSERT_TRUE(OpenOrDie(svm, kLibsvm)->ReadBatch(0, 1, &batch).ok());
  ExpectWellFormed(batch);
  EXPECT_EQ(batch.num_fields(), 1);
  EXPECT_EQ(batch.num_dense, 0);
  EXPECT_EQ(batch.keys[0], (std::vector<uint64_t>{4}));
}

// A generated data set read in slices gives what CriteoReader reads in one go.
TEST(CtrSourceTest, GeneratedFileReadsAsCriteoReaderReadsIt) {
  CtrGeneratorOptions options;
  options.model.unique_keys = 26 * 200;
  options.model.missing_rate = 0.2;
  options.train_samples = 1000;
  options.test_samples = 10;
  options.gzip = true;
  const absl::StatusOr<CtrGeneratorResult> written = GenerateCtrData(testing::TempDir() + "/generated", options);
  ASSERT_TRUE(written.ok()) << written.status();

  int64_t skipped = 0;
  const std::vector<CtrSample> want = ReadAllSamples<CriteoReader, CtrSample>(written->train_path, {}, &skipped);
  ASSERT_EQ(want.size(), 1000u);

  std::unique_ptr<CtrSource> source = OpenOrDie(written->train_path);
  CtrBatch batch;
  size_t next = 0;
  for (int first = 0; first < 1000; first += 64) {
    ASSERT_TRUE(source->ReadBatch(first, 64, &batch).ok());
    for (int64_t i = 0; i < batch.size; ++i, ++next) {
      ASSERT_LT(next, want.size());
      const CtrSample& s = want[next];
      ASSERT_EQ(batch.labels[i], s.label) << "record " << next;
      for (int d = 0; d < kCriteoDense; ++d) {
        ASSERT_EQ(batch.dense[i * kCriteoDense + d], LogTransform(s.dense[d])) << "record " << next;
      }
      for (int f = 0; f < kCriteoCategorical; ++f) {
        ASSERT_EQ(batch.keys[f][i], s.keys[f]) << "record " << next << " field " << f;
      }
    }
  }
  EXPECT_EQ(next, want.size());
  EXPECT_EQ(source->reopens(), 0);
}

}  // namespace
}  // namespace data
}  // namespace pstrain
