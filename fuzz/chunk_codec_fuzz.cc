// The chunk codecs (common/chunk_codec.h over common/compression.h): a pushed chunk's bytes in
// any encoding, checked, scanned for non-finite values and decoded, as the server does with every
// gradient chunk a worker sends.
//
// Input: byte 0 the encoding (values past TOPK included: a peer may send any), byte 1 the chunk
// length (0..255 values), byte 2 where the payload is cut into two runs (a value may straddle
// received slices); the rest is the chunk's data.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/chunk_codec.h"
#include "common/payload_view.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const auto encoding = static_cast<pstrain::ValueEncoding>(data[0] % 6);
  const int64_t length = data[1];
  const absl::string_view bytes(reinterpret_cast<const char*>(data + 3), size - 3);
  const size_t cut = std::min<size_t>(data[2], bytes.size());
  pstrain::PayloadView view;
  view.Append(bytes.substr(0, cut));
  view.Append(bytes.substr(cut));

  (void)pstrain::EncodingName(encoding);
  if (!pstrain::CheckChunkShape(encoding, view, length).ok()) return 0;
  float bad = 0;
  const int64_t at = pstrain::FindNonFiniteValue(encoding, view, length, &bad);
  if (at < -1 || at >= length) __builtin_trap();
  std::vector<float> dst(length);
  pstrain::DecodeChunkValues(encoding, view, length, dst.data());
  return 0;
}
