// Runs the real pstrain-gen-ctr binary: its last stdout line is the JSON the issue promises, and
// the AUC in it is the one recomputed from the files it wrote.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "data/auc.h"
#include "data/criteo_reader.h"
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
  EXPECT_EQ(lines.back(),
            absl::StrFormat("{\"planted_test_auc\": %.10g}", ExactAuc(scores, labels).value()));
}

TEST(GenCtrMainTest, BadFlagsExitTwo) {
  int code = 0;
  RunGenCtr("--out_dir=" + testing::TempDir() + "/gen_ctr_bad --zipf=0", &code);
  EXPECT_EQ(code, 2);
  RunGenCtr("", &code);  // No --out_dir.
  EXPECT_EQ(code, 2);
}

}  // namespace
}  // namespace data
}  // namespace pstrain
