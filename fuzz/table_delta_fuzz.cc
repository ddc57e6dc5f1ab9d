// A table delta merged onto a whole table from their bytes alone (MergeTableDelta,
// server/table_delta.h), as a restore reads a checkpoint chain: corrupt or mismatched pieces are
// refused, and a merge that succeeds gives bytes that parse as a whole table.
//
// Input: byte 0 bit 0 set: fix up each piece's trailing CRC (fuzz_util.h MaybeFixCrc); bytes 1-2
// the base's length (uint16, little-endian); then the base, then the delta.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "server/table_delta.h"
#include "server/table_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const bool fix = data[0] & 1;
  const size_t base_size = std::min<size_t>(data[1] | size_t{data[2]} << 8, size - 3);
  const absl::string_view rest(reinterpret_cast<const char*>(data + 3), size - 3);
  const std::string base = pstrain::fuzz::MaybeFixCrc(rest.substr(0, base_size), fix);
  const std::string delta = pstrain::fuzz::MaybeFixCrc(rest.substr(base_size), fix);
  absl::StatusOr<std::string> merged = pstrain::server::MergeTableDelta(base, delta, "fuzz");
  if (!merged.ok()) return 0;
  absl::StatusOr<pstrain::server::TableBytes> parsed = pstrain::server::ParseTableBytes(*merged, "merged");
  if (!parsed.ok() || parsed->version == pstrain::server::kTableVersionDelta) std::abort();
  return 0;
}
