// A pushed chunk's values as they arrived, in any ValueEncoding of proto/ps.proto (float32, or a
// gradient compressed by the worker: fp16, bf16, top-k), checked and turned back into float32 by
// the server. The compression itself is common/compression.h; this is where it meets the wire.
//
// The values are read straight out of the received bytes (a PayloadView, whose runs may split a
// value and need not be aligned) through a small aligned buffer on the stack, a piece at a time,
// so checking and decoding allocate nothing.
#ifndef PSTRAIN_COMMON_CHUNK_CODEC_H_
#define PSTRAIN_COMMON_CHUNK_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/compression.h"
#include "common/payload_view.h"
#include "proto/ps.pb.h"

namespace pstrain {

// The chunk encoding that carries a gradient compressed as `compression` says.
ValueEncoding EncodingOf(Compression::Kind kind);

// "FLOAT32", "FLOAT16", ... or "encoding 7" for a value no peer should send.
std::string EncodingName(ValueEncoding encoding);

// OK when `data` is a well-formed `encoding` of a chunk of `length` values: a known encoding, the
// right number of bytes, and for TOPK indices that are strictly ascending and below `length`.
// INVALID_ARGUMENT otherwise, saying what is wrong relative to the chunk, e.g. "got 19 bytes of
// data, expected 20 (5 floats)", "got 10 bytes of FLOAT16 data, expected 8 (4 values)", "top-k
// index 3 is 17, not above the previous index 17". Values are not looked at (FindNonFiniteValue).
absl::Status CheckChunkShape(ValueEncoding encoding, const PayloadView& data, int64_t length);

// The position within the chunk of the first NaN or infinite value of a chunk that passed
// CheckChunkShape, or -1 when every value is finite; its value (as float32) in *bad when found.
// For TOPK the position is the entry's index, not its place in the list.
int64_t FindNonFiniteValue(ValueEncoding encoding, const PayloadView& data, int64_t length, float* bad);

// Writes the chunk's `length` values to dst[0, length) as float32, exactly (a TOPK chunk's values
// not listed become 0). REQUIRES: CheckChunkShape passed.
void DecodeChunkValues(ValueEncoding encoding, const PayloadView& data, int64_t length, float* dst);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CHUNK_CODEC_H_
