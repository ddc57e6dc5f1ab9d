// Reading a data stream's ranges (data/stream_source.h) on real files: a range inside one file is
// what CtrSource reads there, a range across files is what one file holding them all would give,
// a forward walk opens each file once, libsvm weights survive the joins; and a bad range, a file
// truncated or deleted after it was catalogued, are refused with an empty batch. Also
// AppendCtrBatch (data/ctr_source.h), which joins the pieces.
#include "data/stream_source.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "data/stream_catalog.h"
#include "data/text_reader_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace data {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr CtrSource::Options kCriteo{DataFormat::kCriteo, BadRecords::kFail};
constexpr CtrSource::Options kLibsvm{DataFormat::kLibsvm, BadRecords::kFail};

// A fresh stream folder; its name relative to the test's temporary folder (for WriteFile).
std::string Folder(const std::string& name) {
  const std::string folder = "stream-source-" + name;
  fs::remove_all(testing::TempDir() + "/" + folder);
  fs::create_directories(testing::TempDir() + "/" + folder);
  return folder;
}

std::string Dir(const std::string& folder) { return testing::TempDir() + "/" + folder; }

// A Criteo line for stream position `p`: label p % 2, I1 = p, I2..I13 = 2, C1 = p as hex,
// C2..C26 = "a1".
std::string CriteoLine(int p) {
  std::vector<std::string> fields = {absl::StrCat(p % 2), absl::StrCat(p)};
  for (int d = 1; d < kCriteoDense; ++d) fields.push_back("2");
  fields.push_back(absl::StrFormat("%x", p));
  for (int f = 1; f < kCriteoCategorical; ++f) fields.push_back("a1");
  return absl::StrJoin(fields, "\t");
}

std::string CriteoLines(int first, int count) {
  std::string text;
  for (int p = first; p < first + count; ++p) absl::StrAppend(&text, CriteoLine(p), "\n");
  return text;
}

// Writes `text` as `name` in the stream `folder`, made ready.
void Put(const std::string& folder, const std::string& name, const std::string& text, bool gzip = false) {
  WriteFile(folder + "/" + name, text, gzip);
  std::ofstream(Dir(folder) + "/" + name + kStreamReadyMarker).close();
}

// A stream of three Criteo files holding positions [0, 5), [5, 9) (gzip) and [9, 15).
StreamCatalog ThreeHours(const std::string& folder) {
  Put(folder, "part-00000.tsv", CriteoLines(0, 5));
  Put(folder, "part-00001.tsv.gz", CriteoLines(5, 4), /*gzip=*/true);
  Put(folder, "part-00002.tsv", CriteoLines(9, 6));
  StreamCatalog catalog(Dir(folder));
  const absl::StatusOr<int> added = catalog.Refresh(0);
  EXPECT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(catalog.records(), 15);
  return catalog;
}

// The positions in a batch of CriteoLine records: I1 undone from its LogTransform.
std::vector<int> Positions(const CtrBatch& batch) {
  std::vector<int> positions;
  for (int64_t i = 0; i < batch.size; ++i) {
    positions.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[i * batch.num_dense]))));
  }
  return positions;
}

std::vector<int> Iota(int first, int count) {
  std::vector<int> v;
  for (int i = first; i < first + count; ++i) v.push_back(i);
  return v;
}

void ExpectSameBatch(const CtrBatch& got, const CtrBatch& want) {
  EXPECT_EQ(got.size, want.size);
  EXPECT_EQ(got.num_dense, want.num_dense);
  EXPECT_EQ(got.labels, want.labels);
  EXPECT_EQ(got.dense, want.dense);
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.weights, want.weights);
}

void ExpectEmpty(const CtrBatch& batch) {
  EXPECT_EQ(batch.size, 0);
  EXPECT_TRUE(batch.labels.empty());
  EXPECT_TRUE(batch.dense.empty());
  for (int f = 0; f < batch.num_fields(); ++f) {
    EXPECT_TRUE(batch.keys[f].empty());
    EXPECT_THAT(batch.offsets[f], ElementsAre(0));
  }
}

// What CtrSource reads from `path`'s records [first, first + count).
CtrBatch ReadFile(const std::string& path, int64_t first, int64_t count, CtrSource::Options options = kCriteo) {
  CtrBatch batch;
  absl::StatusOr<std::unique_ptr<CtrSource>> source = CtrSource::Open(path, options);
  EXPECT_TRUE(source.ok()) << source.status();
  if (source.ok()) {
    const absl::Status status = (*source)->ReadBatch(first, count, &batch);
    EXPECT_TRUE(status.ok()) << status;
  }
  return batch;
}

TEST(StreamSourceTest, RangeInsideOneFileIsWhatCtrSourceReadsThere) {
  const std::string folder = Folder("one");
  const StreamCatalog catalog = ThreeHours(folder);
  StreamSource source(kCriteo);
  CtrBatch batch;
  ASSERT_TRUE(source.ReadBatch(catalog, 6, 2, &batch).ok());
  ExpectSameBatch(batch, ReadFile(Dir(folder) + "/part-00001.tsv.gz", 1, 2));
  EXPECT_EQ(Positions(batch), Iota(6, 2));
  EXPECT_EQ(source.opens(), 1);
}

TEST(StreamSourceTest, RangeAcrossThreeFilesIsTheirConcatenation) {
  const std::string folder = Folder("span");
  const StreamCatalog catalog = ThreeHours(folder);
  // One file holding the whole stream gives what the three must give together.
  const std::string whole = WriteFile("stream-source-whole.tsv", CriteoLines(0, 15));
  StreamSource source(kCriteo);
  CtrBatch batch;
  ASSERT_TRUE(source.ReadBatch(catalog, 3, 9, &batch).ok());  // [3, 5) + [5, 9) + [9, 12)
  EXPECT_EQ(Positions(batch), Iota(3, 9));
  ExpectSameBatch(batch, ReadFile(whole, 3, 9));
  ASSERT_EQ(source.last_files().size(), 3u);
  for (size_t f = 0; f < 3; ++f) EXPECT_EQ(source.last_files()[f].file, f);
  EXPECT_EQ(source.last_files()[0].samples, 2);
  EXPECT_EQ(source.last_files()[1].samples, 4);
  EXPECT_EQ(source.last_files()[2].samples, 3);
  // The whole stream, after a batch that had left stale contents in the source's buffers.
  ASSERT_TRUE(source.ReadBatch(catalog, 0, 15, &batch).ok());
  ExpectSameBatch(batch, ReadFile(whole, 0, 15));
  // An empty range, even at the end.
  ASSERT_TRUE(source.ReadBatch(catalog, 15, 0, &batch).ok());
  ExpectEmpty(batch);
  EXPECT_EQ(batch.num_fields(), kCriteoCategorical);
}

TEST(StreamSourceTest, ForwardWalkOpensEachFileOnceAndGoingBackOpensAgain) {
  const std::string folder = Folder("walk");
  const StreamCatalog catalog = ThreeHours(folder);
  StreamSource source(kCriteo);
  CtrBatch batch;
  std::vector<int> seen;
  for (int first = 0; first < 15; first += 3) {
    ASSERT_TRUE(source.ReadBatch(catalog, first, 3, &batch).ok()) << first;
    for (int p : Positions(batch)) seen.push_back(p);
  }
  EXPECT_EQ(seen, Iota(0, 15));
  EXPECT_EQ(source.opens(), 3);
  // Back within the open file: CtrSource reopens it.
  ASSERT_TRUE(source.ReadBatch(catalog, 10, 2, &batch).ok());
  EXPECT_EQ(Positions(batch), Iota(10, 2));
  EXPECT_EQ(source.opens(), 4);
  // Back to an earlier file, then on past the one between: each opened.
  ASSERT_TRUE(source.ReadBatch(catalog, 1, 2, &batch).ok());
  EXPECT_EQ(Positions(batch), Iota(1, 2));
  EXPECT_EQ(source.opens(), 5);
  ASSERT_TRUE(source.ReadBatch(catalog, 13, 1, &batch).ok());
  EXPECT_EQ(Positions(batch), Iota(13, 1));
  EXPECT_EQ(source.opens(), 6);
}

TEST(StreamSourceTest, LibsvmWeightsAndCommentLinesAcrossFiles) {
  const std::string folder = Folder("libsvm");
  // Positions 0-2 and 3-5; position 2 is a comment line, which holds no sample but is the file's
  // last record: a range ending there is not a short file.
  Put(folder, "part-00000.svm", "1 3:0.5 7:2\n0 4:1\n# a comment\n");
  Put(folder, "part-00001.svm", "1 9:-3\n0\n1 1:1 2:2 3:3\n");
  StreamCatalog catalog(Dir(folder));
  ASSERT_TRUE(catalog.Refresh(0).ok());
  ASSERT_EQ(catalog.records(), 6);
  StreamSource source(kLibsvm);
  CtrBatch batch;
  ASSERT_TRUE(source.ReadBatch(catalog, 1, 5, &batch).ok());
  EXPECT_EQ(batch.size, 4);
  EXPECT_EQ(batch.num_dense, 0);
  EXPECT_EQ(batch.labels, (std::vector<float>{0, 1, 0, 1}));
  ASSERT_EQ(batch.num_fields(), 1);
  EXPECT_EQ(batch.keys[0], (std::vector<uint64_t>{4, 9, 1, 2, 3}));
  EXPECT_EQ(batch.weights[0], (std::vector<float>{1, -3, 1, 2, 3}));
  EXPECT_EQ(batch.offsets[0], (std::vector<int64_t>{0, 1, 2, 2, 5}));
  ASSERT_TRUE(source.ReadBatch(catalog, 0, 3, &batch).ok());
  EXPECT_EQ(batch.keys[0], (std::vector<uint64_t>{3, 7, 4}));
  EXPECT_EQ(batch.weights[0], (std::vector<float>{0.5f, 2, 1}));
}

TEST(StreamSourceTest, BadRecordsSkippedAreSummedOverFiles) {
  const std::string folder = Folder("skip");
  Put(folder, "part-00000.tsv", CriteoLines(0, 2) + "not a record\n");
  Put(folder, "part-00001.tsv", "bad\n" + CriteoLines(4, 2));
  StreamCatalog catalog(Dir(folder));
  ASSERT_TRUE(catalog.Refresh(0).ok());
  StreamSource source({DataFormat::kCriteo, BadRecords::kSkip});
  CtrBatch batch;
  ASSERT_TRUE(source.ReadBatch(catalog, 0, 6, &batch).ok());
  EXPECT_EQ(Positions(batch), (std::vector<int>{0, 1, 4, 5}));
  // Each file's samples, not its lines.
  ASSERT_EQ(source.last_files().size(), 2u);
  EXPECT_EQ(source.last_files()[0].samples, 2);
  EXPECT_EQ(source.last_files()[1].samples, 2);
  EXPECT_EQ(source.skipped(), 2);  // the first file's source is closed by now
  ASSERT_TRUE(source.ReadBatch(catalog, 2, 1, &batch).ok());
  EXPECT_EQ(batch.size, 0);
  EXPECT_EQ(source.skipped(), 3);
}

TEST(StreamSourceTest, ABadRecordFailsNamingItsFileAndLine) {
  const std::string folder = Folder("fail");
  Put(folder, "part-00000.tsv", CriteoLines(0, 2));
  Put(folder, "part-00001.tsv", CriteoLines(2, 1) + "not a record\n");
  StreamCatalog catalog(Dir(folder));
  ASSERT_TRUE(catalog.Refresh(0).ok());
  StreamSource source(kCriteo);  // --bad_records=fail
  CtrBatch batch;
  const absl::Status s = source.ReadBatch(catalog, 1, 3, &batch);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("part-00001.tsv:2:"), std::string::npos) << s;
  ExpectEmpty(batch);
}

TEST(StreamSourceTest, RangeOutsideTheCatalogIsInvalidArgumentWithAnEmptyBatch) {
  const std::string folder = Folder("range");
  const StreamCatalog catalog = ThreeHours(folder);
  StreamSource source(kCriteo);
  CtrBatch batch;
  for (const auto& [first, count] :
       std::vector<std::pair<int64_t, int64_t>>{{10, 6}, {16, 0}, {-1, 2}, {2, -1}, {1, INT64_MAX}}) {
    ASSERT_TRUE(source.ReadBatch(catalog, 0, 2, &batch).ok());
    const absl::Status status = source.ReadBatch(catalog, first, count, &batch);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << first << " +" << count;
    EXPECT_THAT(std::string(status.message()),
                AllOf(HasSubstr(absl::StrCat("[", first, ", +", count, ")")), HasSubstr("<= 15")));
    ExpectEmpty(batch);
    EXPECT_EQ(batch.num_fields(), kCriteoCategorical);
  }
}

TEST(StreamSourceTest, FileTruncatedAfterCataloguingIsDataLossNamingIt) {
  const std::string folder = Folder("truncated");
  Put(folder, "part-00000.tsv", CriteoLines(0, 5));
  Put(folder, "part-00001.tsv", CriteoLines(5, 4));
  StreamCatalog catalog(Dir(folder));
  ASSERT_TRUE(catalog.Refresh(0).ok());
  WriteFile(folder + "/part-00001.tsv", CriteoLines(5, 2));  // 2 of its 4 lines left
  StreamSource source(kCriteo);
  CtrBatch batch;
  absl::Status status = source.ReadBatch(catalog, 3, 5, &batch);  // [3, 5) + lines [0, 3)
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("part-00001.tsv: ends after 2 lines"), HasSubstr("counted 4 records"),
                    HasSubstr("lines [0, 3)"), HasSubstr("positions [3, 8)")));
  ExpectEmpty(batch);
  // A range wholly past the short file's end, and one inside what is left.
  EXPECT_EQ(source.ReadBatch(catalog, 8, 1, &batch).code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(source.ReadBatch(catalog, 5, 2, &batch).ok());
  EXPECT_EQ(Positions(batch), Iota(5, 2));
}

TEST(StreamSourceTest, DeletedFileIsNotFoundNamingItWithAnEmptyBatch) {
  const std::string folder = Folder("deleted");
  const StreamCatalog catalog = ThreeHours(folder);
  StreamSource source(kCriteo);
  CtrBatch batch;
  ASSERT_TRUE(source.ReadBatch(catalog, 0, 2, &batch).ok());
  fs::remove(Dir(folder) + "/part-00002.tsv");
  const absl::Status status = source.ReadBatch(catalog, 3, 8, &batch);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("part-00002.tsv"));
  ExpectEmpty(batch);
  // The files still there read on.
  ASSERT_TRUE(source.ReadBatch(catalog, 3, 6, &batch).ok());
  EXPECT_EQ(Positions(batch), Iota(3, 6));
}

// A batch of 2 dense features and 2 fields: field 0 one key a sample, field 1 `bag` keys.
CtrBatch Batch(std::vector<float> labels, std::vector<std::vector<uint64_t>> bags, std::vector<float> weights) {
  CtrBatch batch;
  batch.size = static_cast<int64_t>(labels.size());
  batch.num_dense = 2;
  batch.labels = labels;
  batch.keys.resize(2);
  batch.offsets.assign(2, {0});
  batch.weights.resize(2);
  for (int64_t i = 0; i < batch.size; ++i) {
    batch.dense.push_back(labels[i] + 10);
    batch.dense.push_back(labels[i] + 20);
    batch.keys[0].push_back(100 + i);
    batch.offsets[0].push_back(i + 1);
    batch.keys[1].insert(batch.keys[1].end(), bags[i].begin(), bags[i].end());
    batch.offsets[1].push_back(static_cast<int64_t>(batch.keys[1].size()));
  }
  batch.weights[1] = weights;
  return batch;
}

TEST(AppendCtrBatchTest, AppendsSamplesRebasingOffsets) {
  CtrBatch to = Batch({1, 0}, {{7, 8}, {}}, {});
  AppendCtrBatch(Batch({0, 1, 1}, {{9}, {5, 6, 4}, {}}, {}), &to);
  EXPECT_EQ(to.size, 5);
  EXPECT_EQ(to.labels, (std::vector<float>{1, 0, 0, 1, 1}));
  EXPECT_EQ(to.dense, (std::vector<float>{11, 21, 10, 20, 10, 20, 11, 21, 11, 21}));
  EXPECT_EQ(to.keys[0], (std::vector<uint64_t>{100, 101, 100, 101, 102}));
  EXPECT_EQ(to.offsets[0], (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(to.keys[1], (std::vector<uint64_t>{7, 8, 9, 5, 6, 4}));
  EXPECT_EQ(to.offsets[1], (std::vector<int64_t>{0, 2, 2, 3, 6, 6}));
  EXPECT_TRUE(to.weights[0].empty());
  EXPECT_TRUE(to.weights[1].empty());
  // Appending an empty batch changes nothing.
  const CtrBatch before = to;
  AppendCtrBatch(Batch({}, {}, {}), &to);
  ExpectSameBatch(to, before);
}

TEST(AppendCtrBatchTest, WeightsOnOneSideOnlyGiveOneWeightPerKey) {
  // Unweighted, then weighted: the first keys weigh 1.
  CtrBatch to = Batch({1}, {{7, 8}}, {});
  AppendCtrBatch(Batch({0, 1}, {{9}, {5, 6}}, {0.5f, 2, 3}), &to);
  EXPECT_EQ(to.keys[1], (std::vector<uint64_t>{7, 8, 9, 5, 6}));
  EXPECT_EQ(to.weights[1], (std::vector<float>{1, 1, 0.5f, 2, 3}));
  EXPECT_TRUE(to.weights[0].empty());
  // Weighted, then unweighted: the appended keys weigh 1.
  AppendCtrBatch(Batch({0}, {{4, 3}}, {}), &to);
  EXPECT_EQ(to.weights[1], (std::vector<float>{1, 1, 0.5f, 2, 3, 1, 1}));
  EXPECT_EQ(to.offsets[1], (std::vector<int64_t>{0, 2, 3, 5, 7}));
  // An empty batch onto weighted ones, and weighted ones onto an empty batch.
  AppendCtrBatch(Batch({}, {}, {}), &to);
  EXPECT_EQ(to.weights[1], (std::vector<float>{1, 1, 0.5f, 2, 3, 1, 1}));
  CtrBatch empty = Batch({}, {}, {});
  AppendCtrBatch(Batch({1}, {{2}}, {0.25f}), &empty);
  EXPECT_EQ(empty.weights[1], (std::vector<float>{0.25f}));
}

TEST(AppendCtrBatchDeathTest, DifferentFormatsAreAProgrammerError) {
  CtrBatch criteo;
  ClearCtrBatch(DataFormat::kCriteo, &criteo);
  CtrBatch libsvm;
  ClearCtrBatch(DataFormat::kLibsvm, &libsvm);
  EXPECT_DEATH(AppendCtrBatch(libsvm, &criteo), "different formats");
}

}  // namespace
}  // namespace data
}  // namespace pstrain
