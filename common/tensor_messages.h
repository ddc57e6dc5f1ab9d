// The tensor-carrying messages of the hot path as the worker and server logic see them, with no
// transport in them: a push to send whose values stay where the caller keeps them, and a push or
// pull answer as received, whose values view into bytes that a transport keeps alive.
//
// common/tensor_wire.h encodes and decodes these for gRPC; an in-process transport (tests) fills
// them from memory. Logic that includes only this header stays free of gRPC.
#ifndef PSTRAIN_COMMON_TENSOR_MESSAGES_H_
#define PSTRAIN_COMMON_TENSOR_MESSAGES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/payload_view.h"
#include "proto/ps.pb.h"

namespace pstrain {

// A PushRequest to send: `header` with chunks that carry tensor_id, offset and length but no
// data, and values[i] the bytes of chunk i's data (normally its length floats, see Floats). The
// bytes are not copied: they must stay alive and unchanged until the call that sends them ends.
struct OutgoingPush {
  PushRequest header;
  std::vector<absl::string_view> values;
};

// The bytes of n floats at p, as an OutgoingPush value.
inline absl::string_view Floats(const float* p, int64_t n) {
  return absl::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(n) * sizeof(float));
}

// Whatever keeps a received message's bytes alive (gRPC's receive slices, an in-process copy).
// Opaque to the logic: it only holds it while it reads the PayloadViews.
class ReceivedBytes {
 public:
  virtual ~ReceivedBytes() = default;
};

// A PullResponse as received: `header` (chunks without data) and each chunk's values, viewing
// into `bytes`, which this object keeps alive.
struct IncomingPull {
  PullResponse header;
  std::vector<PayloadView> values;
  std::unique_ptr<ReceivedBytes> bytes;
};

// A PushRequest as received (the server's side of OutgoingPush).
struct IncomingPush {
  PushRequest header;
  std::vector<PayloadView> values;
  std::unique_ptr<ReceivedBytes> bytes;
};

// Drops an answer's values and the received bytes they point into, keeping the header: once the
// values are installed, holding the receive buffers until the next answer only costs memory.
void ReleaseValues(IncomingPull* pull);

// The reverse of the zero-copy forms, for tests and tools: a PushRequest whose chunks hold their
// data (copied), and a PullResponse likewise.
PushRequest Materialize(const OutgoingPush& push);
PullResponse Materialize(const IncomingPull& pull);
// An OutgoingPush that points into `request`'s chunk data (which must outlive the result); the
// header is a copy without data.
OutgoingPush ViewOf(const PushRequest& request);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TENSOR_MESSAGES_H_
