// Reader for the IDX files of MNIST and Fashion-MNIST.
//
// Format (all integers big-endian):
//   images: u32 magic 0x00000803 (unsigned bytes, 3 dims), u32 count, u32 rows, u32 cols,
//           then count * rows * cols pixel bytes, row-major.
//   labels: u32 magic 0x00000801 (unsigned bytes, 1 dim), u32 count, then count label bytes.
// Either file may be gzip-compressed; that is detected from the gzip magic bytes, not the name.
//
// Pixels are normalized on load: (p / 255 - kPixelMean) / kPixelStd (see data/dataset.h).
//
// All functions are thread-compatible free functions with no shared state; they block on file I/O.
//
// Errors name the file and say what was expected:
//   NOT_FOUND / PERMISSION_DENIED / ...  the file cannot be opened (code from errno), e.g.
//       ".../train-images-idx3-ubyte.gz: cannot open: No such file or directory"
//   DATA_LOSS  wrong magic, implausible dimensions, truncated header or body, corrupt gzip
//              stream (zlib's message), image/label count mismatch, label >= num_classes.
#ifndef PSTRAIN_DATA_IDX_READER_H_
#define PSTRAIN_DATA_IDX_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace pstrain {
namespace data {

inline constexpr uint32_t kIdxImageMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelMagic = 0x00000801;

// Reads an image file and its label file. `limit` > 0 keeps only the first `limit` samples
// (fewer if the files hold fewer); `limit` <= 0 keeps all. Only the kept samples are read, but
// the two headers must agree on the full count. On OK the Dataset has num_classes 10 and every
// label in [0, 10).
absl::StatusOr<Dataset> ReadIdxPair(const std::string& images_path, const std::string& labels_path, int64_t limit);

// The standard file names of a split, without ".gz": e.g. "train-images-idx3-ubyte" and
// "train-labels-idx1-ubyte" for kTrain, "t10k-..." for kTest.
std::string IdxImagesName(Split split);
std::string IdxLabelsName(Split split);

// Loads `split` from `data_dir` (e.g. /usr/share/datasets/fashion-mnist) using the standard file
// names, trying "<name>.gz" then "<name>" for each file. If neither exists the error is the one
// for "<name>.gz" (NOT_FOUND) and also mentions the plain name. `limit` as in ReadIdxPair.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& data_dir, Split split, int64_t limit);

// Reads only the two headers of the split (a few bytes each): sample count after `limit`, rows,
// cols. Cheap enough for the scheduler to call at job start. Checks the same header properties as
// LoadFashionMnist (magic, dimensions, matching counts) but not the file bodies, so an OK here
// does not guarantee that loading succeeds.
absl::StatusOr<DatasetInfo> ReadDatasetInfo(const std::string& data_dir, Split split, int64_t limit);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_IDX_READER_H_
