// A small CTR data set for the cluster tests, made once per test binary by pstrain-gen-ctr
// (Criteo format: train.tsv and test.tsv), and the job flags that train model "ctr" on it.
#ifndef PSTRAIN_TESTS_CTR_DATA_H_
#define PSTRAIN_TESTS_CTR_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::testing {

inline constexpr int64_t kCtrTrain = 30000;
inline constexpr int64_t kCtrTest = 4000;

// The folder with the generated files (kCtrTrain + kCtrTest records, 20k distinct keys, seed 3).
const std::string& CtrDataDir();

// The share of clicks in `dir`'s test file.
double CtrTestClickRate(const std::string& dir);

// --model=ctr on `data_dir`, 2 epochs of batch 256 with small embeddings and MLP, then `extra`.
std::vector<std::string> CtrJob(const std::string& data_dir, std::vector<std::string> extra = {});

// A number of the run summary's embedding_tables ("refused": updates of keys the tables' admission
// dropped; "evicted": rows that left); NaN without tables.
double TablesNumber(const std::string& summary, const std::string& key);

}  // namespace pstrain::testing

#endif  // PSTRAIN_TESTS_CTR_DATA_H_
