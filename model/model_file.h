// The trained-model file: named tensors and their float32 values, with a checksum.
//
// Byte layout (all integers and floats little-endian):
//
//   offset  size         field
//   0       8            magic "PSTRAINM"
//   8       4            uint32 version = 1
//   12      4            uint32 num_tensors
//           per tensor, in order:
//             4          uint32 name_length
//             name_len   name bytes (UTF-8, no terminator)
//             4          uint32 ndim
//             8 * ndim   int64 dims[ndim]
//           4 * total    float32 values of every tensor, tensors back to back in order
//                        (each tensor row-major; total = sum of the products of dims)
//   end-4   4            uint32 CRC-32 (zlib crc32) of every byte before it
//
// Files are written atomically: to a temporary file beside `path`, fsync'ed, then renamed over
// `path`, so a reader never sees a half-written model.
//
// Thread safety: free functions with no shared state.
#ifndef PSTRAIN_MODEL_MODEL_FILE_H_
#define PSTRAIN_MODEL_MODEL_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/param_spec.h"

namespace pstrain {
namespace model {

inline constexpr char kModelFileMagic[] = "PSTRAINM";  // 8 bytes on disk, no terminator
inline constexpr uint32_t kModelFileVersion = 1;

// The contents of a model file. params carry name, shape, num_elements and flat_offset (the
// values layout); init and fan_in/fan_out are not stored and stay at their defaults.
struct ModelFile {
  std::vector<ParamSpec> params;
  std::vector<float> values;
};

// Writes `params` (name and shape of each) and `values` (their flat layout, in params order).
// INVALID_ARGUMENT when values.size() differs from the sum of the tensors' elements or a shape
// disagrees with num_elements; INTERNAL or the errno's code for I/O failures, naming the path.
// Blocks on disk I/O including fsync.
absl::Status WriteModelFile(const std::string& path, const std::vector<ParamSpec>& params,
                            absl::Span<const float> values);

// The largest model file read: kMaxModelParameters (common/job_spec.h, 2^30) float32 values
// and room for their names and shapes.
inline constexpr int64_t kMaxModelFileBytes = (int64_t{4} << 30) + (int64_t{64} << 20);

// Reads and verifies a model file. Errors name the file and what is wrong: NOT_FOUND (no file),
// FAILED_PRECONDITION (not a regular file, e.g. a FIFO or /dev/zero, or larger than
// kMaxModelFileBytes: nothing is read), INVALID_ARGUMENT (bad magic: not a model file; unsupported
// version; a NaN or infinite value, naming the tensor and the element), DATA_LOSS (truncated,
// trailing bytes, malformed header, checksum mismatch). Blocks on disk I/O.
absl::StatusOr<ModelFile> ReadModelFile(const std::string& path);

// The bytes WriteModelFile would write, in memory (a worker sends them to the scheduler, which
// writes the file). Errors as WriteModelFile's INVALID_ARGUMENT.
absl::StatusOr<std::string> SerializeModelFile(const std::vector<ParamSpec>& params, absl::Span<const float> values);

// ReadModelFile for bytes already in memory; `where` names them in errors (e.g. "final model
// from worker 0"). Same checks and codes: a well-formed file whose values hold a NaN or an
// infinity is refused too (INVALID_ARGUMENT "...: tensor 'fc1.weight' element 17 is nan"), since
// training from it or evaluating it can only produce NaN.
absl::StatusOr<ModelFile> ParseModelFile(absl::string_view contents, absl::string_view where);

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_MODEL_FILE_H_
