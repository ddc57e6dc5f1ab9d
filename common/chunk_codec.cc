#include "common/chunk_codec.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

// Values per piece read through the stack buffer: 16 KiB of 4-byte words, small enough to stay
// in L1/L2 between the copy out of the received bytes and the decode.
constexpr int64_t kWords = 4096;

bool IsHalf(ValueEncoding e) { return e == FLOAT16 || e == BFLOAT16; }

// The values of a half-precision chunk, a piece at a time: fn(first, codes) for consecutive
// pieces that cover [0, length), codes aligned.
template <typename Fn>
void ForEachHalfPiece(const PayloadView& data, int64_t length, Fn fn) {
  alignas(64) uint16_t codes[2 * kWords];
  PayloadReader reader(data);
  for (int64_t first = 0; first < length; first += 2 * kWords) {
    const int64_t n = std::min<int64_t>(2 * kWords, length - first);
    reader.Read(2 * n, codes);
    if (!fn(first, absl::Span<const uint16_t>(codes, n))) return;
  }
}

// The indices (or the values) of a top-k chunk of k entries, a piece at a time: fn(first, words)
// with words[j] the bytes of entry first + j.
template <typename Fn>
void ForEachTopKPiece(const PayloadView& data, int64_t k, bool values, Fn fn) {
  alignas(64) uint32_t words[kWords];
  PayloadReader reader(data, values ? 4 * k : 0);
  for (int64_t first = 0; first < k; first += kWords) {
    const int64_t n = std::min<int64_t>(kWords, k - first);
    reader.Read(4 * n, words);
    if (!fn(first, absl::Span<const uint32_t>(words, n))) return;
  }
}

uint32_t TopKIndex(const PayloadView& data, int64_t j) {
  uint32_t index;
  PayloadReader(data, 4 * j).Read(4, &index);
  return index;
}

}  // namespace

ValueEncoding EncodingOf(Compression::Kind kind) {
  switch (kind) {
    case Compression::kNone:
      return FLOAT32;
    case Compression::kFp16:
      return FLOAT16;
    case Compression::kBf16:
      return BFLOAT16;
    case Compression::kTopK:
      return TOPK;
  }
  LOG(FATAL) << "compression kind " << kind;
}

std::string EncodingName(ValueEncoding encoding) {
  if (ValueEncoding_IsValid(encoding)) return ValueEncoding_Name(encoding);
  return absl::StrCat("encoding ", static_cast<int>(encoding));
}

absl::Status CheckChunkShape(ValueEncoding encoding, const PayloadView& data, int64_t length) {
  const int64_t size = static_cast<int64_t>(data.size());
  switch (encoding) {
    case FLOAT32:
      if (size == 4 * length) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat("got ", size, " bytes of data, expected ", 4 * length, " (", length, " floats)"));
    case FLOAT16:
    case BFLOAT16:
      if (size == 2 * length) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat("got ", size, " bytes of ", EncodingName(encoding),
                                                     " data, expected ", 2 * length, " (", length, " values)"));
    case TOPK:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown value encoding ", static_cast<int>(encoding),
                                                     ", expected FLOAT32, FLOAT16, BFLOAT16 or TOPK"));
  }
  if (size % 8 != 0 || size / 8 > length) {
    return absl::InvalidArgumentError(absl::StrCat("got ", size, " bytes of TOPK data, expected 8 bytes per entry ",
                                                   "(a uint32 index and a float32 value) for at most ", length,
                                                   " entries"));
  }
  absl::Status status;
  int64_t previous = -1;
  ForEachTopKPiece(data, size / 8, /*values=*/false, [&](int64_t first, absl::Span<const uint32_t> indices) {
    for (size_t j = 0; j < indices.size(); ++j) {
      const int64_t index = indices[j];
      if (index >= length) {
        status = absl::InvalidArgumentError(
            absl::StrCat("top-k index ", first + j, " is ", index, ", beyond the chunk's ", length, " values"));
        return false;
      }
      if (index <= previous) {
        status = absl::InvalidArgumentError(
            absl::StrCat("top-k index ", first + j, " is ", index, ", not above the previous index ", previous));
        return false;
      }
      previous = index;
    }
    return true;
  });
  return status;
}

int64_t FindNonFiniteValue(ValueEncoding encoding, const PayloadView& data, int64_t length, float* bad) {
  int64_t found = -1;
  if (encoding == FLOAT32) {
    found = data.FindNonFinite(bad);
  } else if (IsHalf(encoding)) {
    const bool fp16 = encoding == FLOAT16;
    ForEachHalfPiece(data, length, [&](int64_t first, absl::Span<const uint16_t> codes) {
      const int64_t at = fp16 ? FindNonFiniteFp16(codes) : FindNonFiniteBf16(codes);
      if (at < 0) return true;
      found = first + at;
      *bad = fp16 ? Fp16ToFloat(codes[at]) : Bf16ToFloat(codes[at]);
      return false;
    });
  } else {
    CHECK_EQ(encoding, TOPK);
    ForEachTopKPiece(data, data.size() / 8, /*values=*/true, [&](int64_t first, absl::Span<const uint32_t> values) {
      const int64_t at = FindNonFinite(reinterpret_cast<const char*>(values.data()), values.size());
      if (at < 0) return true;
      found = TopKIndex(data, first + at);
      std::memcpy(bad, &values[at], 4);
      return false;
    });
  }
  return found;
}

void DecodeChunkValues(ValueEncoding encoding, const PayloadView& data, int64_t length, float* dst) {
  if (encoding == FLOAT32) {
    data.CopyTo(dst);
    return;
  }
  if (IsHalf(encoding)) {
    const bool fp16 = encoding == FLOAT16;
    ForEachHalfPiece(data, length, [&](int64_t first, absl::Span<const uint16_t> codes) {
      const absl::Span<float> out(dst + first, codes.size());
      const absl::Status decoded = fp16 ? DecodeFp16(codes, out) : DecodeBf16(codes, out);
      CHECK(decoded.ok()) << decoded;
      return true;
    });
    return;
  }
  CHECK_EQ(encoding, TOPK);
  std::fill(dst, dst + length, 0.0f);
  // Indices and values are read in step, a piece of each at a time.
  const int64_t k = static_cast<int64_t>(data.size() / 8);
  alignas(64) uint32_t indices[kWords];
  PayloadReader index_reader(data);
  ForEachTopKPiece(data, k, /*values=*/true, [&](int64_t, absl::Span<const uint32_t> values) {
    index_reader.Read(4 * values.size(), indices);
    for (size_t j = 0; j < values.size(); ++j) std::memcpy(&dst[indices[j]], &values[j], 4);
    return true;
  });
}

}  // namespace pstrain
