// The model file (model/model_file.h): the final model the scheduler writes and a declared model
// a worker sends, parsed and verified before anything uses its shapes or values.
//
// Input: byte 0 bit 0 set: fix up the trailing CRC (fuzz_util.h MaybeFixCrc); the rest is the file.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "model/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes =
      pstrain::fuzz::MaybeFixCrc(absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1), data[0] & 1);
  absl::StatusOr<pstrain::model::ModelFile> file = pstrain::model::ParseModelFile(bytes, "fuzz input");
  if (!file.ok()) return 0;
  int64_t total = 0;
  for (const pstrain::model::ParamSpec& p : file->params) total += p.num_elements;
  if (total != static_cast<int64_t>(file->values.size())) __builtin_trap();
  return 0;
}
