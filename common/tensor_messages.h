// The tensor-carrying messages of the hot path as the worker and server logic see them, with no
// transport in them: a push to send whose values stay where the caller keeps them, and a push or
// pull answer as received, whose values view into bytes that a transport keeps alive.
//
// transport/tensor_wire.h encodes and decodes these for gRPC; an in-process transport (tests) fills
// them from memory. Logic that includes only this header stays free of gRPC.
#ifndef PSTRAIN_COMMON_TENSOR_MESSAGES_H_
#define PSTRAIN_COMMON_TENSOR_MESSAGES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/buffer_pool.h"
#include "common/payload_view.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/ps.pb.h"

namespace pstrain {

// One SparseRows (embedding rows of one table) to send, its keys and rows outside protobuf: `keys`
// n x 8 bytes of little-endian uint64, `rows` n x dim x 4 bytes of float32 (or empty: keys only).
// The bytes are not copied: they must stay alive and unchanged until the call that sends them ends.
struct OutgoingRows {
  int32_t table_id = 0;
  absl::string_view keys;
  absl::string_view rows;
};

// One SparseRows as received: keys and rows view into bytes that a transport keeps alive.
struct IncomingRows {
  int32_t table_id = 0;
  PayloadView keys;
  PayloadView rows;
};

// Views of entries that sit in protobuf strings (a message built in memory, an in-process
// transport); they borrow `list`'s strings.
std::vector<IncomingRows> RowsOf(const google::protobuf::RepeatedPtrField<SparseRows>& list);

// A PushRequest to send: `header` with chunks that carry tensor_id, offset and length but no
// data, and values[i] the bytes of chunk i's data (normally its length floats, see Floats). The
// bytes are not copied: they must stay alive and unchanged until the call that sends them ends.
//
// `sparse` and `pull_sparse` go out after the header's own entries of PushRequest.sparse and
// .pull_sparse (normally none), as more entries of those fields.
struct OutgoingPush {
  PushRequest header;
  std::vector<absl::string_view> values;
  std::vector<OutgoingRows> sparse;
  std::vector<OutgoingRows> pull_sparse;
};

// A PullRequest to send: `header` (normally without sparse entries) and `sparse`, sent as more
// entries of PullRequest.sparse. The keys are not copied, as in OutgoingPush.
struct OutgoingPullRequest {
  PullRequest header;
  std::vector<OutgoingRows> sparse;
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

// The embedding rows of an answer as a server builds them, without protobuf: entry i is
// PullResponse.sparse(i), its keys and rows byte ranges of `bytes` (one pooled buffer), which the
// encoded answer takes over.
struct OutgoingRowsAnswer {
  struct Entry {
    int32_t table_id = 0;
    size_t keys_offset = 0;
    size_t keys_size = 0;
    size_t rows_offset = 0;
    size_t rows_size = 0;
  };
  std::vector<Entry> entries;
  PooledBuffer bytes;
};

// A PullResponse as received: `header` (chunks without data) and each chunk's values, viewing
// into `bytes`, which this object keeps alive. PullResponse.sparse arrives in `sparse` (the
// header's own is empty), unless a transport filled the header's instead (see SparseOf).
struct IncomingPull {
  PullResponse header;
  std::vector<PayloadView> values;
  std::vector<IncomingRows> sparse;
  std::unique_ptr<ReceivedBytes> bytes;
};

// The embedding rows of an answer: `sparse`, or views of the header's entries when a transport
// put them there (tests' in-process one).
std::vector<IncomingRows> SparseOf(const IncomingPull& pull);

// A PushRequest as received (the server's side of OutgoingPush): PushRequest.sparse and
// .pull_sparse arrive in `sparse` and `pull_sparse`, the header's own are empty.
struct IncomingPush {
  PushRequest header;
  std::vector<PayloadView> values;
  std::vector<IncomingRows> sparse;
  std::vector<IncomingRows> pull_sparse;
  std::unique_ptr<ReceivedBytes> bytes;
};

// A PullRequest as received: PullRequest.sparse arrives in `sparse`, the header's is empty.
struct IncomingPullRequest {
  PullRequest header;
  std::vector<IncomingRows> sparse;
  std::unique_ptr<ReceivedBytes> bytes;
};

// Drops an answer's values and the received bytes they point into, keeping the header: once the
// values are installed, holding the receive buffers until the next answer only costs memory.
void ReleaseValues(IncomingPull* pull);

// The reverse of the zero-copy forms, for tests and tools: a PushRequest whose chunks and sparse
// entries hold their data (copied), and a PullResponse likewise.
PushRequest Materialize(const OutgoingPush& push);
PullResponse Materialize(const IncomingPull& pull);
// An OutgoingPush that points into `request`'s chunk data (which must outlive the result); the
// header is a copy without data.
OutgoingPush ViewOf(const PushRequest& request);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TENSOR_MESSAGES_H_
