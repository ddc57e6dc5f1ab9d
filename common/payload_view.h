// A view of tensor bytes as they arrived from the network: the runs of received buffers that
// hold them, in order. The hot path hands these to their consumer (a server's gradient buffer, a
// worker's weights) so that received values are copied exactly once, straight to where they
// belong (transport/tensor_wire.h makes them).
#ifndef PSTRAIN_COMMON_PAYLOAD_VIEW_H_
#define PSTRAIN_COMMON_PAYLOAD_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// Bytes as they arrived: runs (parts of gRPC slices) in order. A run boundary may fall inside a
// float, and runs need not be aligned. Does not own the bytes.
class PayloadView {
 public:
  PayloadView() = default;
  explicit PayloadView(absl::string_view bytes) { Append(bytes); }

  void Append(absl::string_view run);
  void Clear() {
    runs_.clear();
    size_ = 0;
  }
  size_t size() const { return size_; }
  const absl::InlinedVector<absl::string_view, 2>& runs() const { return runs_; }

  // Copies all size() bytes to `dst`.
  void CopyTo(void* dst) const;
  // The index of the first float (of size() / 4) that is NaN or infinite, or -1; its value in
  // *bad when found.
  int64_t FindNonFinite(float* bad) const;

 private:
  absl::InlinedVector<absl::string_view, 2> runs_;
  size_t size_ = 0;
};

// Reads a PayloadView front to back in pieces of any size, wherever its run boundaries fall: for
// consumers that need the bytes aligned (decoders that load uint16 or uint32 values), a piece at a
// time through a small buffer of their own. Does not own the view.
class PayloadReader {
 public:
  // Starts `start` bytes into the view. REQUIRES: start <= view.size().
  explicit PayloadReader(const PayloadView& view, size_t start = 0);

  size_t remaining() const { return remaining_; }
  // Copies the next n bytes to dst. REQUIRES: n <= remaining().
  void Read(size_t n, void* dst);

 private:
  const PayloadView& view_;
  size_t run_ = 0;     // index of the run holding the next byte
  size_t offset_ = 0;  // of the next byte within that run
  size_t remaining_;
};

// Index of the first NaN or +-Inf among `n` little-endian float32 values at `bytes` (any
// alignment), or -1 when all are finite.
int64_t FindNonFinite(const char* bytes, int64_t n);

// "nan", "inf" or "-inf" for a non-finite value, for error messages.
std::string NonFiniteName(float v);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PAYLOAD_VIEW_H_
