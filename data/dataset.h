// In-memory image-classification data set (Fashion-MNIST / MNIST shaped).
//
// A Dataset is a plain value: the IDX reader (data/idx_reader.h) fills it once and
// it is read-only afterwards, so any number of threads may read it concurrently.
#ifndef PSTRAIN_DATA_DATASET_H_
#define PSTRAIN_DATA_DATASET_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"

namespace pstrain {
namespace data {

// Pixels are stored normalized as (p / 255 - kPixelMean) / kPixelStd, p in [0, 255].
// The constants are the Fashion-MNIST training-set mean and standard deviation of p / 255;
// they are used for MNIST too, so both data sets feed the model values of order one.
inline constexpr double kPixelMean = 0.2860;
inline constexpr double kPixelStd = 0.3530;

struct Dataset {
  int64_t num_samples = 0;
  int rows = 0, cols = 0;  // 28 x 28 for (Fashion-)MNIST
  int num_classes = 10;
  // Sample i occupies images[i * features(), (i + 1) * features()), row-major, normalized.
  std::vector<float> images;
  // labels[i] is in [0, num_classes).
  std::vector<int32_t> labels;

  int64_t features() const { return int64_t{rows} * cols; }
};

enum class Split { kTrain, kTest };

// "train" or "test", for messages and logs.
inline absl::string_view SplitName(Split split) { return split == Split::kTrain ? "train" : "test"; }

// What a data set looks like without its contents (see ReadDatasetInfo).
struct DatasetInfo {
  int64_t num_samples = 0;
  int rows = 0, cols = 0;
  int num_classes = 10;

  int64_t features() const { return int64_t{rows} * cols; }
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_DATASET_H_
