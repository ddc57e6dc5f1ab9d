#include "data/ctr_files.h"

#include <chrono>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "data/ctr_generator.h"
#include "data/text_reader_test_util.h"

namespace pstrain {
namespace data {
namespace {

// A fresh, empty folder `name` in the test's temporary folder; its path.
std::string EmptyDir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(CtrFilesTest, ParseDataFormatAcceptsBothSpellingsAndListsThemOtherwise) {
  EXPECT_EQ(ParseDataFormat("criteo").value(), DataFormat::kCriteo);
  EXPECT_EQ(ParseDataFormat("libsvm").value(), DataFormat::kLibsvm);
  EXPECT_EQ(DataFormatName(DataFormat::kCriteo), "criteo");
  EXPECT_EQ(DataFormatName(DataFormat::kLibsvm), "libsvm");
  const absl::StatusOr<DataFormat> bad = ParseDataFormat("Criteo");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "'Criteo'")) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "criteo or libsvm")) << bad.status();
}

TEST(CtrFilesTest, FindsKaggleTrainTxt) {
  const std::string dir = EmptyDir("kaggle");
  WriteFile("kaggle/train.txt", "x\n");
  EXPECT_EQ(FindCtrFile(dir, DataFormat::kCriteo, "train").value(), dir + "/train.txt");
}

TEST(CtrFilesTest, FirstNameOfTheTableWins) {
  const std::string dir = EmptyDir("order");
  WriteFile("order/train.txt", "x\n");
  WriteFile("order/train.tsv.gz", "x\n", /*gzip=*/true);
  EXPECT_EQ(FindCtrFile(dir, DataFormat::kCriteo, "train").value(), dir + "/train.tsv.gz");
  WriteFile("order/train.tsv", "x\n");
  EXPECT_EQ(FindCtrFile(dir, DataFormat::kCriteo, "train").value(), dir + "/train.tsv");
}

TEST(CtrFilesTest, LibsvmNames) {
  const std::string dir = EmptyDir("svm");
  WriteFile("svm/train.svm.gz", "1 1:1\n", /*gzip=*/true);
  WriteFile("svm/test.libsvm", "1 1:1\n");
  WriteFile("svm/train.tsv", "x\n");  // A Criteo name: not a libsvm file.
  const absl::StatusOr<CtrFiles> files = FindCtrFiles(dir, DataFormat::kLibsvm);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->train, dir + "/train.svm.gz");
  EXPECT_EQ(files->test, dir + "/test.libsvm");
}

TEST(CtrFilesTest, NotFoundNamesEveryPathTried) {
  const std::string dir = EmptyDir("none");
  WriteFile("none/train.tsv", "x\n");
  std::filesystem::create_directories(dir + "/test.tsv");  // A folder is not a file.
  const absl::StatusOr<CtrFiles> files = FindCtrFiles(dir, DataFormat::kCriteo);
  ASSERT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  for (const char* name : {"test.tsv", "test.tsv.gz", "test.txt", "test.txt.gz"}) {
    EXPECT_TRUE(absl::StrContains(files.status().message(), dir + "/" + name)) << files.status();
  }
  EXPECT_TRUE(absl::StrContains(files.status().message(), "criteo test")) << files.status();
}

TEST(CtrFilesTest, FindsWhatTheGeneratorWrites) {
  for (const bool gzip : {false, true}) {
    CtrGeneratorOptions options;
    options.model.unique_keys = 26 * 50;
    options.train_samples = 20;
    options.test_samples = 30;
    options.gzip = gzip;
    const std::string dir = EmptyDir(gzip ? "gen_gz" : "gen_plain");
    const absl::StatusOr<CtrGeneratorResult> written = GenerateCtrData(dir, options);
    ASSERT_TRUE(written.ok()) << written.status();
    const absl::StatusOr<CtrFiles> found = FindCtrFiles(dir, DataFormat::kCriteo);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->train, written->train_path);
    EXPECT_EQ(found->test, written->test_path);
  }
}

TEST(RecordCounterTest, CountsLinesOfPlainAndGzipFiles) {
  RecordCounter counter;
  EXPECT_EQ(counter.Count(WriteFile("count.txt", "a\nb\nc\n")).value(), 3);
  EXPECT_EQ(counter.Count(WriteFile("count.txt.gz", "a\nb\nc\nd", /*gzip=*/true)).value(), 4);
  EXPECT_EQ(counter.Count(WriteFile("count_empty.txt", "")).value(), 0);
}

TEST(RecordCounterTest, RemembersACountUntilTheFileChanges) {
  RecordCounter counter;
  const std::string path = WriteFile("remember.txt", "a\nb\nc\n");
  ASSERT_EQ(counter.Count(path).value(), 3);
  const auto modified = std::filesystem::last_write_time(path);

  // Same size and modification time: the count is remembered, not read again.
  WriteFile("remember.txt", "abcd\n\n");
  std::filesystem::last_write_time(path, modified);
  EXPECT_EQ(counter.Count(path).value(), 3);

  // A new modification time: counted again.
  std::filesystem::last_write_time(path, modified + std::chrono::seconds(1));
  EXPECT_EQ(counter.Count(path).value(), 2);

  // A new size: counted again.
  WriteFile("remember.txt", "a\nb\nc\nd\ne\n");
  EXPECT_EQ(counter.Count(path).value(), 5);
}

TEST(RecordCounterTest, MissingFileIsNotFound) {
  RecordCounter counter;
  const std::string path = testing::TempDir() + "/no_such_file.tsv";
  const absl::StatusOr<int64_t> count = counter.Count(path);
  ASSERT_EQ(count.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(count.status().message(), path)) << count.status();
}

}  // namespace
}  // namespace data
}  // namespace pstrain
