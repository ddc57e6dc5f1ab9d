#include "data/libsvm_reader.h"

#include <zlib.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "data/text_reader_test_util.h"

namespace pstrain {
namespace data {
namespace {

using Features = std::vector<std::pair<uint64_t, float>>;

std::vector<LibsvmSample> ReadAll(const std::string& path, LibsvmReader::Options options = {},
                                  int64_t* skipped = nullptr) {
  return ReadAllSamples<LibsvmReader, LibsvmSample>(path, options, skipped);
}

TEST(LibsvmReaderTest, ReadsLabelsFeaturesCommentsPlainAndGzip) {
  const std::string contents =
      "+1 3:0.5 1:2 18446744073709551615:-1e-2 # comment\n"
      "# a whole-line comment\n"
      "\n"
      "-1\tqid:7 5:1\r\n"
      "0.25";
  for (const bool gzip : {false, true}) {
    const std::vector<LibsvmSample> samples = ReadAll(WriteFile(gzip ? "a.svm.gz" : "a.svm", contents, gzip));
    ASSERT_EQ(samples.size(), 3u);
    EXPECT_EQ(samples[0].label, 1.0f);
    EXPECT_EQ(samples[0].features, (Features{{3, 0.5f}, {1, 2.0f}, {18446744073709551615ULL, -0.01f}}));
    EXPECT_EQ(samples[1].label, -1.0f);
    EXPECT_EQ(samples[1].features, (Features{{5, 1.0f}}));
    EXPECT_EQ(samples[2].label, 0.25f);
    EXPECT_TRUE(samples[2].features.empty());
  }
}

TEST(LibsvmReaderTest, EachBadRecordNamesFileLineAndExpectation) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"x 1:2", "label 'x', expected a finite number"},
      {"nan 1:2", "label 'nan', expected a finite number"},
      {"1 1:2 3",
       "feature 2 '3', expected index:value with a decimal uint64 index and a finite "
       "number"},
      {"1 a:2",
       "feature 1 'a:2', expected index:value with a decimal uint64 index and a finite "
       "number"},
      {"1 -1:2",
       "feature 1 '-1:2', expected index:value with a decimal uint64 index and a "
       "finite number"},
      {"1 1:inf",
       "feature 1 '1:inf', expected index:value with a decimal uint64 index and a "
       "finite number"},
      {"1 1:",
       "feature 1 '1:', expected index:value with a decimal uint64 index and a finite "
       "number"},
  };
  for (const auto& [line, message] : cases) {
    const std::string path = WriteFile("bad.svm", "1 1:1\n# c\n" + line + "\n1 2:2\n");
    auto reader = LibsvmReader::Open(path, {});
    ASSERT_TRUE(reader.ok());
    LibsvmSample sample;
    ASSERT_TRUE((*reader)->Next(&sample).value());
    const absl::StatusOr<bool> bad = (*reader)->Next(&sample);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(bad.status().message(), absl::StrCat(path, ":3: ", message));
  }
}

TEST(LibsvmReaderTest, SkipModeCountsAndRangesUseLineNumbers) {
  const std::string path = WriteFile("skip.svm", "1 1:1\nbad\n0 2:2\n# c\n1 3:3 x\n0 4:4\n");
  LibsvmReader::Options options;
  options.bad_records = BadRecords::kSkip;
  int64_t skipped = 0;
  EXPECT_EQ(ReadAll(path, options, &skipped).size(), 3u);
  EXPECT_EQ(skipped, 2);

  options.range = {2, 3};  // Lines 3..5: one sample, a comment, a bad line.
  const std::vector<LibsvmSample> range = ReadAll(path, options, &skipped);
  ASSERT_EQ(range.size(), 1u);
  EXPECT_EQ(range[0].features, (Features{{2, 2.0f}}));
  EXPECT_EQ(skipped, 1);
}

}  // namespace
}  // namespace data
}  // namespace pstrain
