// The IDX reader (data/idx_reader.h) on arbitrary image and label files, plain or gzip: the
// headers claim sizes that the reader must check against what the files hold before it trusts
// them.
//
// Input: byte 0 the sample limit (0 = all), bytes 1-2 (little-endian) the size of the image file;
// the rest is the image file, then the label file. Both are written under the standard training
// split names, so the folder lookup (LoadFashionMnist, ReadDatasetInfo) runs too.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "data/idx_reader.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int64_t limit = data[0];
  const absl::string_view rest(reinterpret_cast<const char*>(data + 3), size - 3);
  const size_t split = std::min<size_t>(data[1] | (size_t{data[2]} << 8), rest.size());
  using pstrain::data::Split;
  pstrain::fuzz::WriteScratch(pstrain::data::IdxImagesName(Split::kTrain), rest.substr(0, split));
  pstrain::fuzz::WriteScratch(pstrain::data::IdxLabelsName(Split::kTrain), rest.substr(split));
  const std::string& dir = pstrain::fuzz::ScratchDir();
  (void)pstrain::data::ReadDatasetInfo(dir, Split::kTrain, limit);
  (void)pstrain::data::LoadFashionMnist(dir, Split::kTrain, limit);
  return 0;
}
