#include "data/ctr_generator.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "data/auc.h"

namespace pstrain {
namespace data {
namespace {

constexpr size_t kBlockBytes = size_t{1} << 20;

}  // namespace

absl::Status WriteCtrSamples(const std::string& path, const PlantedCtrModel& model, SplitMix64 rng, int64_t samples,
                             bool gzip, const std::function<int(int64_t)>& day_of,
                             const std::function<void(int, double)>& on_sample) {
  return WriteFileAtomically(path, "CTR data file", [&](int fd) -> absl::Status {
    gzFile gz = nullptr;
    if (gzip) {
      const int gz_fd = ::dup(fd);  // gzclose closes it; WriteFileAtomically keeps `fd`.
      if (gz_fd < 0) return ErrnoStatus(errno, absl::StrCat(path, ": dup"));
      gz = gzdopen(gz_fd, "wb1");
      if (gz == nullptr) {
        ::close(gz_fd);
        return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot allocate a zlib stream"));
      }
    }
    auto flush = [&](const std::string& block) -> absl::Status {
      if (!gzip) return WriteAll(fd, block.data(), block.size(), path);
      if (block.empty()) return absl::OkStatus();
      if (gzwrite(gz, block.data(), static_cast<unsigned>(block.size())) <= 0) {
        int errnum = Z_OK;
        return absl::DataLossError(absl::StrCat(path, ": gzip write: ", gzerror(gz, &errnum)));
      }
      return absl::OkStatus();
    };
    std::string block;
    block.reserve(kBlockBytes + 1024);
    CtrSample sample;
    absl::Status status;
    for (int64_t i = 0; i < samples && status.ok(); ++i) {
      model.DrawFeatures(rng, &sample, day_of(i));
      const double p = PlantedCtrModel::Sigmoid(model.Logit(sample));
      sample.label = rng.Uniform() < p ? 1 : 0;
      on_sample(sample.label, p);
      AppendCriteoLine(sample, &block);
      if (block.size() >= kBlockBytes) {
        status = flush(block);
        block.clear();
      }
    }
    if (status.ok()) status = flush(block);
    if (gz != nullptr && gzclose(gz) != Z_OK && status.ok()) {
      status = absl::DataLossError(absl::StrCat(path, ": gzip close failed"));
    }
    return status;
  });
}

void AppendCriteoLine(const CtrSample& sample, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  char line[512];
  char* p = line;
  *p++ = static_cast<char>('0' + sample.label);
  for (int i = 0; i < kCriteoDense; ++i) {
    *p++ = '\t';
    if ((sample.dense_missing >> i) & 1) continue;
    p = std::to_chars(p, line + sizeof(line), static_cast<int64_t>(sample.dense[i])).ptr;
  }
  for (int f = 0; f < kCriteoCategorical; ++f) {
    *p++ = '\t';
    if ((sample.categorical_missing >> f) & 1) continue;
    const uint32_t v = sample.categorical[f];
    for (int shift = 28; shift >= 0; shift -= 4) *p++ = kHex[(v >> shift) & 0xf];
  }
  *p++ = '\n';
  out->append(line, p);
}

absl::StatusOr<CtrGeneratorResult> GenerateCtrData(const std::string& out_dir, const CtrGeneratorOptions& options) {
  ASSIGN_OR_RETURN(const PlantedCtrModel model, PlantedCtrModel::Create(options.model));
  if (options.train_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("train_samples ", options.train_samples, ", expected >= 0"));
  }
  if (options.test_samples < 2) {
    return absl::InvalidArgumentError(absl::StrCat("test_samples ", options.test_samples, ", expected >= 2"));
  }
  if (::mkdir(out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat(out_dir, ": cannot create the output folder"));
  }
  const std::string suffix = options.gzip ? ".tsv.gz" : ".tsv";
  CtrGeneratorResult result;
  result.train_path = absl::StrCat(out_dir, "/train", suffix);
  result.test_path = absl::StrCat(out_dir, "/test", suffix);
  const uint64_t seed = options.model.seed;

  // Training samples are split into days in order: sample i belongs to day i * days / samples.
  const int days = options.model.days;
  const int64_t train_samples = options.train_samples;
  const auto train_day = [days, train_samples](int64_t i) {
    return static_cast<int>(static_cast<__int128>(i) * days / train_samples);
  };
  RETURN_IF_ERROR(WriteCtrSamples(result.train_path, model, SplitMix64(Mix64(seed) ^ 1), options.train_samples,
                                  options.gzip, train_day,
                                  [&](int label, double) { result.train_positives += label; }));
  std::vector<double> scores;
  std::vector<uint8_t> labels;
  scores.reserve(options.test_samples);
  labels.reserve(options.test_samples);
  // The test set is the last day's: what a model trained on every day is judged on.
  RETURN_IF_ERROR(WriteCtrSamples(
      result.test_path, model, SplitMix64(Mix64(seed) ^ 2), options.test_samples, options.gzip,
      [days](int64_t) { return days - 1; },
      [&](int label, double p) {
        scores.push_back(p);
        labels.push_back(static_cast<uint8_t>(label));
        result.test_positives += label;
      }));
  ASSIGN_OR_RETURN(result.planted_test_auc, ExactAuc(scores, labels));
  return result;
}

}  // namespace data
}  // namespace pstrain
