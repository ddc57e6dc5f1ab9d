#include "tests/ctr_data.h"

#include <cmath>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/process.h"

namespace pstrain::testing {

const std::string& CtrDataDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(MakeTempDir("ctr-data"));
    absl::StatusOr<RunResult> gen =
        Run({BinDir() + "/pstrain-gen-ctr", "--out_dir=" + *d, "--train_samples=" + std::to_string(kCtrTrain),
             "--test_samples=" + std::to_string(kCtrTest), "--unique_keys=20000", "--seed=3"},
            absl::Minutes(1));
    EXPECT_TRUE(gen.ok() && gen->exit_code == 0) << (gen.ok() ? gen->output : gen.status().ToString());
    return d;
  }();
  return *dir;
}

double CtrTestClickRate(const std::string& dir) {
  std::ifstream in(dir + "/test.tsv");
  std::string line;
  int64_t clicks = 0, all = 0;
  while (std::getline(in, line)) {
    clicks += line[0] == '1';
    ++all;
  }
  return all == 0 ? 0 : static_cast<double>(clicks) / all;
}

std::vector<std::string> CtrJob(const std::string& data_dir, std::vector<std::string> extra) {
  std::vector<std::string> flags = {"--model=ctr", "--data_dir=" + data_dir, "--epochs=2",    "--batch_size=256",
                                    "--seed=5",    "--embedding_dim=8",      "--hidden=64,32"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

double TablesNumber(const std::string& summary, const std::string& key) {
  const size_t tables = summary.find("\"embedding_tables\"");
  return tables == std::string::npos ? std::nan("") : JsonNumber(summary.substr(tables), key);
}

}  // namespace pstrain::testing
