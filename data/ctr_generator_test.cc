#include "data/ctr_generator.h"

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/auc.h"
#include "data/criteo_reader.h"

namespace pstrain {
namespace data {
namespace {

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

CtrGeneratorOptions SmallOptions() {
  CtrGeneratorOptions options;
  options.model.unique_keys = 26 * 500;
  options.model.seed = 42;
  options.model.missing_rate = 0.1;
  options.train_samples = 2000;
  options.test_samples = 3000;
  return options;
}

CtrGeneratorResult Generate(const std::string& name, const CtrGeneratorOptions& options) {
  const absl::StatusOr<CtrGeneratorResult> result = GenerateCtrData(testing::TempDir() + "/" + name, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.value_or(CtrGeneratorResult{});
}

TEST(CtrGeneratorTest, SameSeedSameFilesOtherSeedOtherFiles) {
  CtrGeneratorOptions options = SmallOptions();
  const CtrGeneratorResult a = Generate("gen_a", options);
  const CtrGeneratorResult b = Generate("gen_b", options);
  EXPECT_EQ(ReadBytes(a.train_path), ReadBytes(b.train_path));
  EXPECT_EQ(ReadBytes(a.test_path), ReadBytes(b.test_path));
  EXPECT_EQ(a.planted_test_auc, b.planted_test_auc);
  options.model.seed = 43;
  const CtrGeneratorResult c = Generate("gen_c", options);
  EXPECT_NE(ReadBytes(a.train_path), ReadBytes(c.train_path));
  // The test set does not depend on the number of training samples.
  options = SmallOptions();
  options.train_samples = 10;
  EXPECT_EQ(ReadBytes(Generate("gen_d", options).test_path), ReadBytes(a.test_path));
}

// Reads the test file back and recomputes the planted AUC from it; also checks what was read.
void ExpectPrintedAucMatchesFiles(bool gzip) {
  CtrGeneratorOptions options = SmallOptions();
  options.gzip = gzip;
  const CtrGeneratorResult result = Generate(gzip ? "gen_gz" : "gen_plain", options);
  EXPECT_EQ(result.test_path.substr(result.test_path.size() - (gzip ? 7 : 4)), gzip ? ".tsv.gz" : ".tsv");
  const PlantedCtrModel model = PlantedCtrModel::Create(options.model).value();

  auto reader = CriteoReader::Open(result.test_path, {});
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<double> scores;
  std::vector<uint8_t> labels;
  int64_t missing_dense = 0, missing_categorical = 0;
  CtrSample sample;
  while ((*reader)->Next(&sample).value()) {
    scores.push_back(PlantedCtrModel::Sigmoid(model.Logit(sample)));
    labels.push_back(static_cast<uint8_t>(sample.label));
    missing_dense += __builtin_popcount(sample.dense_missing);
    missing_categorical += __builtin_popcount(sample.categorical_missing);
  }
  ASSERT_EQ(scores.size(), 3000u);
  int64_t positives = 0;
  for (uint8_t l : labels) positives += l;
  EXPECT_EQ(positives, result.test_positives);
  EXPECT_GT(positives, 3000 * 0.1);  // A CTR-like but learnable positive rate.
  EXPECT_LT(positives, 3000 * 0.45);
  // missing_rate 0.1 of 3000 * 13 and 3000 * 26 values.
  EXPECT_NEAR(missing_dense, 3900, 250);
  EXPECT_NEAR(missing_categorical, 7800, 350);
  EXPECT_EQ(ExactAuc(scores, labels).value(), result.planted_test_auc);
  EXPECT_GT(result.planted_test_auc, 0.7);  // The planted model carries real signal.
}

TEST(CtrGeneratorTest, PrintedAucEqualsRecomputationFromPlainFiles) { ExpectPrintedAucMatchesFiles(false); }

TEST(CtrGeneratorTest, PrintedAucEqualsRecomputationFromGzipFiles) { ExpectPrintedAucMatchesFiles(true); }

TEST(CtrGeneratorTest, FormattedLinesParseBack) {
  CtrSample sample;
  sample.label = 1;
  sample.dense.fill(3);
  sample.dense[2] = 0;
  sample.dense_missing = 1u << 5;
  sample.dense[5] = 0;
  for (int f = 0; f < kCriteoCategorical; ++f) sample.categorical[f] = 0x1000u * f + 0xab;
  sample.categorical_missing = 1u << 25;
  sample.categorical[25] = 0;
  std::string line;
  AppendCriteoLine(sample, &line);
  ASSERT_EQ(line.back(), '\n');
  line.pop_back();
  CtrSample parsed;
  ASSERT_TRUE(ParseCriteoLine(line, true, &parsed).ok()) << line;
  EXPECT_EQ(parsed.label, 1);
  EXPECT_EQ(parsed.dense, sample.dense);
  EXPECT_EQ(parsed.dense_missing, sample.dense_missing);
  EXPECT_EQ(parsed.categorical, sample.categorical);
  EXPECT_EQ(parsed.categorical_missing, sample.categorical_missing);
  EXPECT_EQ(parsed.keys[3], CriteoKey(3, 0x30abu));
  EXPECT_EQ(parsed.keys[25], CriteoMissingKey(25));
}

TEST(CtrGeneratorTest, DaysWithoutNewKeysWriteTheSameFiles) {
  const CtrGeneratorResult one_day = Generate("gen_day1", SmallOptions());
  CtrGeneratorOptions options = SmallOptions();
  options.model.days = 4;
  const CtrGeneratorResult four_days = Generate("gen_day4", options);
  EXPECT_EQ(ReadBytes(one_day.train_path), ReadBytes(four_days.train_path));
  EXPECT_EQ(ReadBytes(one_day.test_path), ReadBytes(four_days.test_path));
}

// Reads every value of `path` and the day its id belongs to (-1: a lasting id), per record.
std::vector<std::vector<int>> DaysOfValues(const std::string& path, const PlantedCtrModel& model) {
  auto reader = CriteoReader::Open(path, {});
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<std::vector<int>> days;
  CtrSample sample;
  while (reader.ok() && (*reader)->Next(&sample).value()) {
    std::vector<int>& record = days.emplace_back();
    for (int f = 0; f < kCriteoCategorical; ++f) {
      if ((sample.categorical_missing >> f) & 1) continue;
      record.push_back(model.DayOfValue(f, sample.categorical[f]));
    }
  }
  return days;
}

// Each day draws about new_key_rate of its values from ids of its own, which no other day (and
// no record of another day) draws; the test set is the last day's.
TEST(CtrGeneratorTest, DriftingKeysComeFromTheirDayOnly) {
  CtrGeneratorOptions options = SmallOptions();
  options.model.days = 4;
  options.model.new_key_rate = 0.3;
  options.train_samples = 4000;
  const CtrGeneratorResult result = Generate("gen_drift", options);
  const PlantedCtrModel model = PlantedCtrModel::Create(options.model).value();

  const std::vector<std::vector<int>> train = DaysOfValues(result.train_path, model);
  ASSERT_EQ(train.size(), 4000u);
  std::vector<int64_t> own(4, 0), values(4, 0);
  for (size_t i = 0; i < train.size(); ++i) {
    const int day = static_cast<int>(i / 1000);
    for (int value_day : train[i]) {
      ASSERT_TRUE(value_day == -1 || value_day == day)
          << "record " << i << " of day " << day << " has an id of day " << value_day;
      own[day] += value_day == day;
      ++values[day];
    }
  }
  for (int day = 0; day < 4; ++day) {
    EXPECT_NEAR(static_cast<double>(own[day]) / values[day], 0.3, 0.02) << "day " << day;
  }
  int64_t test_own = 0, test_values = 0;
  for (const std::vector<int>& record : DaysOfValues(result.test_path, model)) {
    for (int value_day : record) {
      ASSERT_TRUE(value_day == -1 || value_day == 3) << "a test id of day " << value_day;
      test_own += value_day == 3;
      ++test_values;
    }
  }
  EXPECT_NEAR(static_cast<double>(test_own) / test_values, 0.3, 0.02);
  // The planted model still carries signal on the last day, new ids included.
  EXPECT_GT(result.planted_test_auc, 0.7);
}

TEST(CtrGeneratorTest, RejectsBadOptions) {
  CtrGeneratorOptions options = SmallOptions();
  options.model.zipf = 0;
  EXPECT_EQ(GenerateCtrData(testing::TempDir() + "/gen_bad", options).status().message(), "zipf 0, expected > 0");
  options = SmallOptions();
  options.model.unique_keys = 25;
  EXPECT_EQ(GenerateCtrData(testing::TempDir() + "/gen_bad", options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = SmallOptions();
  options.model.missing_rate = 1;
  EXPECT_EQ(GenerateCtrData(testing::TempDir() + "/gen_bad", options).status().message(),
            "missing_rate 1, expected in [0, 1)");
  options = SmallOptions();
  options.model.days = 0;
  EXPECT_EQ(GenerateCtrData(testing::TempDir() + "/gen_bad", options).status().message(), "days 0, expected >= 1");
  options = SmallOptions();
  options.model.new_key_rate = 1.5;
  EXPECT_EQ(GenerateCtrData(testing::TempDir() + "/gen_bad", options).status().message(),
            "new_key_rate 1.5, expected in [0, 1]");
  options = SmallOptions();
  options.model.unique_keys = uint64_t{26} << 30;  // 2^30 ids a field: room for 3 copies.
  options.model.days = 4;
  options.model.new_key_rate = 0.1;
  EXPECT_EQ(GenerateCtrData(testing::TempDir() + "/gen_bad", options).status().message(),
            "unique_keys 27917287424 with days 4 and new_key_rate > 0: each day needs its own copy "
            "of a field's 1073741824 ids, and (days + 1) * 1073741824 must stay within 2^32");
  options.model.days = 3;
  EXPECT_TRUE(PlantedCtrModel::Create(options.model).ok());
  options = SmallOptions();
  options.test_samples = 1;
  EXPECT_EQ(GenerateCtrData(testing::TempDir() + "/gen_bad", options).status().message(),
            "test_samples 1, expected >= 2");
}

}  // namespace
}  // namespace data
}  // namespace pstrain
