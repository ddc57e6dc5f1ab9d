// A model export: a self-describing folder with a trained model's dense tensors and every
// embedding table's rows, which pstrain-export writes from a job's checkpoints
// (serving/checkpoint_export.h) and serving and other tools read. docs/reference/export-format.md
// is the format's user documentation.
//
//   DIR/manifest.textproto   an ExportManifest (proto/export.proto) in protobuf text format
//   DIR/dense.model          the dense tensors, a pstrain model file (docs/reference/model-file.md):
//                            pstrain-eval reads it
//   DIR/table-<id>.rows      one table's rows, every server's together, keys ascending:
//
//     offset  size       field
//     0       8          magic "PSTRAINR"
//     8       4          uint32 version = 1
//     12      4          int32 dim
//     16      4          uint32 row dtype (TableSpec::RowDtype: 0 FP32, 1 FP16, 2 BF16)
//     20      4          uint32 value bytes V a row (dim x 4 in FP32, dim x 2 rounded up to 4 else)
//     24      8          uint64 row count N
//     32      N*(8+V)    per row: uint64 key, then its value (little-endian floats, or 16-bit
//                        codes padded with one zero code when dim is odd)
//     end-4   4          uint32 CRC-32 (zlib) of every byte before it
//
// A key without a row reads as its initial value (ExportedTable.init_bound, seed and id), as on
// the servers. The optimizer's state is not exported: an export is for reading the model, a
// checkpoint for training on.
//
// WriteModelExport writes a fresh folder beside DIR and renames it into place, so a reader sees
// a whole export or none (it refuses to replace an existing DIR).
//
// Thread safety: free functions and plain values.
#ifndef PSTRAIN_SERVING_MODEL_EXPORT_H_
#define PSTRAIN_SERVING_MODEL_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/model_file.h"
#include "proto/export.pb.h"

namespace pstrain::serving {

// One table's rows, decoded to float32 (values: keys.size() x dim, row after row).
struct TableRows {
  std::vector<uint64_t> keys;
  std::vector<float> values;
};

struct ModelExport {
  // format, version, step, job and the tables' descriptions (rows and file are filled by
  // WriteModelExport and checked by ReadModelExport).
  ExportManifest manifest;
  model::ModelFile dense;
  // In manifest.tables order: the keys, and the values decoded to float32 (WriteModelExport writes
  // keys and stored_values; the values are stored_values decoded).
  std::vector<TableRows> tables;
  // The values as the servers store them (float32, or 16-bit codes under FP16 / BF16), row after
  // row, manifest.tables(t).dim wide: what the rows file holds. The export rounds nothing.
  std::vector<std::string> stored_values;
};

// Writes `e` as DIR. FAILED_PRECONDITION when DIR exists; INVALID_ARGUMENT for an export
// inconsistent in itself (sizes, keys not ascending); the file errors of common/file_io.h.
absl::Status WriteModelExport(const ModelExport& e, const std::string& dir);

// Reads and checks an export: NOT_FOUND (no manifest), DATA_LOSS (a file truncated or corrupt,
// keys out of order, counts that disagree with the manifest), INVALID_ARGUMENT (a manifest that
// does not parse or is not an export's, values NaN or infinite); each naming the file.
absl::StatusOr<ModelExport> ReadModelExport(const std::string& dir);

// The float32 values of `stored` (whole rows of TableRowValueBytes(dim, dtype) bytes, as the servers
// store them). INVALID_ARGUMENT for a partial row or a code that does not decode.
absl::StatusOr<std::vector<float>> DecodeStoredValues(absl::string_view stored, int32_t dim, TableSpec::RowDtype dtype);

// The rows of a rows file's `bytes` (the layout above) for the manifest's `table`, checked as
// ReadModelExport checks them; the stored values go to *stored. Errors start with `where`.
absl::StatusOr<TableRows> ParseRowsFile(absl::string_view bytes, const ExportedTable& table, const std::string& where,
                                        std::string* stored);

// The bytes of a table's rows file (the layout above).
std::string EncodeRowsFile(int32_t dim, TableSpec::RowDtype dtype, const std::vector<uint64_t>& keys,
                           const std::string& stored_values);

inline constexpr char kExportFormat[] = "pstrain-export";
inline constexpr int kExportVersion = 1;

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_MODEL_EXPORT_H_
