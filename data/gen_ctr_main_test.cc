// Runs the real pstrain-gen-ctr binary: its last stdout line is the JSON the issue promises, and
// the AUC in it is the one recomputed from the files it wrote; in stream mode it writes one ready
// file per hour of drifting keys at the rate asked, then ends the stream, and resumes one.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "data/auc.h"
#include "data/criteo_reader.h"
#include "data/ctr_stream_writer.h"
#include "data/planted_ctr_model.h"

namespace pstrain {
namespace data {
namespace {

std::string Binary() {
  const char* dir = std::getenv("PSTRAIN_BIN_DIR");
  return std::string(dir != nullptr ? dir : "bin") + "/pstrain-gen-ctr";
}

// Runs `args` after the binary; returns its stdout and sets `*exit_code`.
std::string RunGenCtr(const std::string& args, int* exit_code) {
  FILE* pipe = ::popen((Binary() + " " + args + " 2>/dev/null").c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(GenCtrMainTest, LastLineIsThePlantedAucOfTheFilesWritten) {
  const std::string dir = testing::TempDir() + "/gen_ctr_main";
  int code = 0;
  const std::string out = RunGenCtr("--out_dir=" + dir +
                                        " --train_samples=100 --test_samples=2000 --unique_keys=2600"
                                        " --seed=5 --missing_rate=0.2",
                                    &code);
  ASSERT_EQ(code, 0) << out;
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());

  PlantedCtrOptions options;
  options.unique_keys = 2600;
  options.seed = 5;
  options.missing_rate = 0.2;
  const PlantedCtrModel model = PlantedCtrModel::Create(options).value();
  auto reader = CriteoReader::Open(dir + "/test.tsv", {});
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<double> scores;
  std::vector<uint8_t> labels;
  CtrSample sample;
  while ((*reader)->Next(&sample).value()) {
    scores.push_back(PlantedCtrModel::Sigmoid(model.Logit(sample)));
    labels.push_back(static_cast<uint8_t>(sample.label));
  }
  ASSERT_EQ(scores.size(), 2000u);
  EXPECT_EQ(lines.back(), absl::StrFormat("{\"planted_test_auc\": %.10g}", ExactAuc(scores, labels).value()));
}

TEST(GenCtrMainTest, AStreamIsOneReadyFilePerHourOfDriftingKeysAtTheRateThenEnds) {
  const std::string dir = testing::TempDir() + "/gen_ctr_stream";
  std::filesystem::remove_all(dir);
  int code = 0;
  const auto start = std::chrono::steady_clock::now();
  const std::string out = RunGenCtr("--stream_dir=" + dir +
                                        " --hours=3 --records_per_hour=600 --rate=3000 --unique_keys=2600"
                                        " --new_key_rate=0.5 --seed=5",
                                    &code);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(code, 0) << out;
  EXPECT_GE(seconds, 0.55) << "1,800 records at 3,000 a second are marked ready over 0.6 s";
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out;
  std::vector<std::set<uint64_t>> keys(3);
  for (int hour = 0; hour < 3; ++hour) {
    const std::string file = dir + "/" + CtrStreamFileName(hour, false);
    EXPECT_TRUE(std::filesystem::exists(file + kStreamReadyMarker)) << file;
    EXPECT_NE(lines[hour].find(absl::StrFormat("{\"hour\": %d, \"file\": \"%s\", \"records\": 600", hour, file)),
              std::string::npos)
        << lines[hour];
    auto reader = CriteoReader::Open(file, {});
    ASSERT_TRUE(reader.ok()) << reader.status();
    CtrSample sample;
    int64_t records = 0;
    while ((*reader)->Next(&sample).value()) {
      ++records;
      for (uint64_t k : sample.keys) keys[hour].insert(k);
    }
    EXPECT_EQ(records, 600);
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + kStreamEndMarker));
  // What a stream job's catalog takes of it.
  StreamCatalog catalog(dir);
  ASSERT_TRUE(catalog.Refresh(0).ok());
  EXPECT_EQ(catalog.files().size(), 3u);
  EXPECT_EQ(catalog.records(), 1800);
  EXPECT_TRUE(catalog.ended());
  // The keys drift: the last hour has ids the first never saw.
  int unseen = 0;
  for (uint64_t k : keys[2]) unseen += keys[0].count(k) == 0;
  EXPECT_GT(unseen, 100);
  // An ended stream is not written again; a folder with hours needs --resume_stream.
  RunGenCtr("--stream_dir=" + dir + " --hours=3 --records_per_hour=600 --resume_stream", &code);
  EXPECT_EQ(code, 1);
  std::filesystem::remove(dir + "/" + kStreamEndMarker);
  RunGenCtr("--stream_dir=" + dir + " --hours=4 --records_per_hour=600", &code);
  EXPECT_EQ(code, 1);
  const std::string resumed = RunGenCtr("--stream_dir=" + dir +
                                            " --hours=4 --records_per_hour=600 --resume_stream --unique_keys=2600"
                                            " --new_key_rate=0.5 --seed=5",
                                        &code);
  EXPECT_EQ(code, 0);
  EXPECT_NE(resumed.find("{\"hour\": 3,"), std::string::npos) << resumed;
  EXPECT_EQ(resumed.find("{\"hour\": 2,"), std::string::npos) << "hours already there are kept";
}

TEST(GenCtrMainTest, BadFlagsExitTwo) {
  int code = 0;
  RunGenCtr("--out_dir=" + testing::TempDir() + "/gen_ctr_bad --zipf=0", &code);
  EXPECT_EQ(code, 2);
  RunGenCtr("", &code);  // No --out_dir.
  EXPECT_EQ(code, 2);
  RunGenCtr("--stream_dir=" + testing::TempDir() + "/gen_ctr_bad_stream --records_per_hour=1", &code);
  EXPECT_EQ(code, 2);
  RunGenCtr("--stream_dir=a --out_dir=b", &code);
  EXPECT_EQ(code, 2);
}

}  // namespace
}  // namespace data
}  // namespace pstrain
