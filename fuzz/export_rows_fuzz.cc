// A model export's rows file (serving/model_export.h ParseRowsFile): what pstrain-serve and
// pstrain.read_export read from a folder anyone with write access to it could have touched.
//
// Input: byte 0 bit 0 set: fix up the trailing CRC (fuzz_util.h MaybeFixCrc); the rest is the file.
// The manifest's description of the table is taken from the file's own header (dim, dtype, rows)
// where it has one, so that the checks past the header are reached.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "serving/model_export.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes =
      pstrain::fuzz::MaybeFixCrc(absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1), data[0] & 1);
  pstrain::ExportedTable table;
  table.set_name("t");
  table.set_dim(1);
  if (bytes.size() >= 32) {
    int32_t dim;
    uint32_t dtype;
    uint64_t rows;
    std::memcpy(&dim, bytes.data() + 12, 4);
    std::memcpy(&dtype, bytes.data() + 16, 4);
    std::memcpy(&rows, bytes.data() + 24, 8);
    table.set_dim(dim);
    if (pstrain::TableSpec::RowDtype_IsValid(static_cast<int>(dtype))) {
      table.set_row_dtype(static_cast<pstrain::TableSpec::RowDtype>(dtype));
    }
    table.set_rows(static_cast<int64_t>(rows & 0x7fffffffffffffffULL));
  }
  std::string stored;
  absl::StatusOr<pstrain::serving::TableRows> rows =
      pstrain::serving::ParseRowsFile(bytes, table, "fuzz input", &stored);
  if (!rows.ok()) return 0;
  if (rows->keys.size() != static_cast<size_t>(table.rows())) __builtin_trap();
  if (rows->values.size() != rows->keys.size() * static_cast<size_t>(table.dim())) __builtin_trap();
  for (size_t i = 1; i < rows->keys.size(); ++i) {
    if (rows->keys[i] <= rows->keys[i - 1]) __builtin_trap();
  }
  return 0;
}
