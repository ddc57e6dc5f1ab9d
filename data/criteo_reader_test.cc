#include "data/criteo_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "data/text_reader_test_util.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace data {
namespace {

// A valid line: label 1, I_i = i, C_f = f as 8 hex digits; `edit` changes fields (0 = label).
std::string Line(const std::vector<std::pair<int, std::string>>& edits = {}) {
  std::vector<std::string> fields = {"1"};
  for (int i = 0; i < kCriteoDense; ++i) fields.push_back(absl::StrCat(i));
  for (int f = 0; f < kCriteoCategorical; ++f) fields.push_back(absl::StrCat("0000aa", 10 + f));
  for (const auto& [index, value] : edits) fields[index] = value;
  return absl::StrJoin(fields, "\t");
}

std::vector<CtrSample> ReadAll(const std::string& path, CriteoReader::Options options = {},
                               int64_t* skipped = nullptr) {
  return ReadAllSamples<CriteoReader, CtrSample>(path, options, skipped);
}

absl::Status FirstError(const std::string& path) {
  auto reader = CriteoReader::Open(path, {});
  if (!reader.ok()) return reader.status();
  CtrSample sample;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&sample);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
  }
}

TEST(CriteoReaderTest, ParsesValuesAndMissingOnes) {
  const std::string path =
      WriteFile("values.tsv", Line({{0, "0"}, {1, ""}, {3, "-7"}, {14, ""}, {15, "68FD1E64"}}) + "\n");
  const std::vector<CtrSample> samples = ReadAll(path);
  ASSERT_EQ(samples.size(), 1u);
  const CtrSample& s = samples[0];
  EXPECT_EQ(s.label, 0);
  EXPECT_EQ(s.dense[0], 0.0f);
  EXPECT_EQ(s.dense_missing, 1u);
  EXPECT_EQ(s.dense[1], 1.0f);
  EXPECT_EQ(s.dense[2], -7.0f);
  EXPECT_EQ(s.dense[12], 12.0f);
  EXPECT_EQ(s.categorical_missing, 1u);
  EXPECT_EQ(s.keys[0], CriteoMissingKey(0));
  EXPECT_EQ(s.categorical[1], 0x68fd1e64u);
  EXPECT_EQ(s.keys[1], CriteoKey(1, 0x68fd1e64u));
  EXPECT_EQ(s.categorical[25], 0x0000aa35u);
  EXPECT_EQ(s.keys[25], CriteoKey(25, 0x0000aa35u));
}

TEST(CriteoReaderTest, KeysOfDifferentFieldsAndMissingNeverCollide) {
  std::vector<uint64_t> keys;
  for (int f = 0; f < kCriteoCategorical; ++f) {
    keys.push_back(CriteoMissingKey(f));
    for (uint32_t v : {0u, 1u, 0xffffffffu}) keys.push_back(CriteoKey(f, v));
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end());
}

TEST(CriteoReaderTest, LogTransformClampsNegatives) {
  EXPECT_EQ(LogTransform(-3), 0.0f);
  EXPECT_EQ(LogTransform(0), 0.0f);
  EXPECT_FLOAT_EQ(LogTransform(std::exp(2.0f) - 1), 2.0f);
}

TEST(CriteoReaderTest, PlainAndGzipReadTheSame) {
  const std::string contents = Line() + "\n" + Line({{0, "0"}, {20, ""}}) + "\r\n" + Line();
  const std::vector<CtrSample> plain = ReadAll(WriteFile("same.tsv", contents));
  const std::vector<CtrSample> gz = ReadAll(WriteFile("same.tsv.gz", contents, true));
  ASSERT_EQ(plain.size(), 3u);  // CRLF accepted, last line without '\n' read.
  ASSERT_EQ(gz.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plain[i].label, gz[i].label);
    EXPECT_EQ(plain[i].keys, gz[i].keys);
    EXPECT_EQ(plain[i].dense, gz[i].dense);
    EXPECT_EQ(plain[i].categorical_missing, gz[i].categorical_missing);
  }
  EXPECT_EQ(plain[1].label, 0);
  EXPECT_EQ(plain[1].categorical_missing, 1u << 6);
}

TEST(CriteoReaderTest, EachBadRecordNamesFileLineAndExpectation) {
  const std::string good = Line() + "\n";
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"1\t2",
       "2 fields, expected 40 tab-separated fields (label, 13 integer and 26 categorical "
       "features)"},
      {"",
       "1 fields, expected 40 tab-separated fields (label, 13 integer and 26 categorical "
       "features)"},
      {Line() + "\t",
       "41 fields, expected 40 tab-separated fields (label, 13 integer and 26 "
       "categorical features)"},
      {Line({{0, "2"}}), "label '2', expected 0 or 1"},
      {Line({{0, ""}}), "label '', expected 0 or 1"},
      {Line({{3, "12a"}}), "integer feature I3 '12a', expected a decimal integer or nothing"},
      {Line({{13, "1.5"}}), "integer feature I13 '1.5', expected a decimal integer or nothing"},
      {Line({{18, "zz"}}), "categorical feature C5 'zz', expected 1 to 8 hex digits or nothing"},
      {Line({{14, "123456789"}}), "categorical feature C1 '123456789', expected 1 to 8 hex digits or nothing"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteFile("bad.tsv", good + good + c.line + "\n" + good);
    const absl::Status status = FirstError(path);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(status.message(), absl::StrCat(path, ":3: ", c.message));
  }
}

TEST(CriteoReaderTest, SkipModeSkipsAndCountsBadRecords) {
  const std::string path = WriteFile("skip.tsv", absl::StrCat(Line(), "\n", Line({{0, "x"}}), "\n", Line({{0, "0"}}),
                                                              "\n", "junk\n", Line({{30, "g"}}), "\n"));
  CriteoReader::Options options;
  options.bad_records = BadRecords::kSkip;
  int64_t skipped = 0;
  const std::vector<CtrSample> samples = ReadAll(path, options, &skipped);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].label, 1);
  EXPECT_EQ(samples[1].label, 0);
  EXPECT_EQ(skipped, 3);
}

TEST(CriteoReaderTest, RecordRangesTileTheFile) {
  std::string contents;
  for (int i = 0; i < 7; ++i) contents += Line({{1, absl::StrCat(i)}}) + "\n";
  const std::string path = WriteFile("ranges.tsv.gz", contents, true);
  const absl::StatusOr<int64_t> count = CountCriteoRecords(path);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 7);
  std::vector<float> seen;
  for (int64_t first = 0; first < 7; first += 3) {
    CriteoReader::Options options;
    options.range = {first, 3};
    for (const CtrSample& s : ReadAll(path, options)) seen.push_back(s.dense[0]);
  }
  EXPECT_EQ(seen, (std::vector<float>{0, 1, 2, 3, 4, 5, 6}));
  CriteoReader::Options past_end;
  past_end.range = {10, 5};
  EXPECT_TRUE(ReadAll(path, past_end).empty());
}

TEST(CriteoReaderTest, ReadsFilesWithoutLabels) {
  std::string line = Line();
  line = line.substr(line.find('\t') + 1);  // Kaggle's test.txt: 39 fields.
  CriteoReader::Options options;
  options.has_label = false;
  const std::vector<CtrSample> samples = ReadAll(WriteFile("nolabel.tsv", line + "\n"), options);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].label, -1);
  EXPECT_EQ(samples[0].dense[4], 4.0f);
}

TEST(CriteoReaderTest, MissingFileAndCorruptGzip) {
  const std::string missing = testing::TempDir() + "/no-such.tsv";
  const auto reader = CriteoReader::Open(missing, {});
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reader.status().message(), missing + ": cannot open: No such file or directory");

  std::string contents;
  for (int i = 0; i < 2000; ++i) contents += Line({{1, absl::StrCat(i * 7919)}}) + "\n";
  const std::string full = WriteFile("cut.tsv.gz", contents, true);
  std::ifstream in(full, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cut = WriteFile("cut2.tsv.gz", bytes.substr(0, bytes.size() / 2));
  const absl::Status status = FirstError(cut);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("corrupt gzip stream"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace data
}  // namespace pstrain
