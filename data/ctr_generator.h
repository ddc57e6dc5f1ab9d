// Writes a synthetic CTR data set in the Criteo format (criteo_reader.h) from a planted model
// (planted_ctr_model.h): the library behind pstrain-gen-ctr.
//
// Files: <out_dir>/train.tsv and <out_dir>/test.tsv (".tsv.gz", gzip level 1, with options.gzip).
// Each is written atomically (common/file_io.h), streaming, in 1 MiB blocks: memory stays small
// whatever the sample counts, except 9 bytes per test sample kept for the AUC.
//
// Days (PlantedCtrOptions.days, new_key_rate): train.tsv holds the days in order, day d the
// samples [d * train_samples / days, (d + 1) * train_samples / days); test.tsv is drawn from the
// last day, so a trained model is judged on the ids of the days it trained on last.
//
// Determinism: the same options give byte-identical files. Train and test draw from separate
// streams of the seed, so the test set does not depend on train_samples.
//
// Thread-compatible free functions; they block on file I/O.
#ifndef PSTRAIN_DATA_CTR_GENERATOR_H_
#define PSTRAIN_DATA_CTR_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "data/criteo_reader.h"
#include "data/planted_ctr_model.h"

namespace pstrain {
namespace data {

struct CtrGeneratorOptions {
  PlantedCtrOptions model;
  int64_t train_samples = 2000000;
  int64_t test_samples = 200000;  // >= 2, so that the AUC can be defined.
  bool gzip = false;
};

struct CtrGeneratorResult {
  std::string train_path;
  std::string test_path;
  int64_t train_positives = 0;
  int64_t test_positives = 0;
  // The exact AUC (auc.h) of the planted probabilities on the test set written.
  double planted_test_auc = 0;
};

// Writes both files into `out_dir` (created if missing, one level). INVALID_ARGUMENT for bad
// options; the errors of WriteFileAtomically; INVALID_ARGUMENT if the test set drew only one
// class (the AUC is undefined: write more test samples).
absl::StatusOr<CtrGeneratorResult> GenerateCtrData(const std::string& out_dir, const CtrGeneratorOptions& options);

// Writes `samples` samples drawn from `rng` to `path` atomically (gzip level 1 when `gzip`):
// sample i of day day_of(i), its label drawn from its planted probability; calls
// on_sample(label, probability) for each. The errors of WriteFileAtomically, naming `path`.
absl::Status WriteCtrSamples(const std::string& path, const PlantedCtrModel& model, SplitMix64 rng, int64_t samples,
                             bool gzip, const std::function<int(int64_t)>& day_of,
                             const std::function<void(int, double)>& on_sample);

// Appends `sample` as one Criteo line with its '\n': categorical values as 8 lowercase hex
// digits, dense values as integers, missing ones empty. REQUIRES: label 0 or 1, dense values
// integers.
void AppendCriteoLine(const CtrSample& sample, std::string* out);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_CTR_GENERATOR_H_
