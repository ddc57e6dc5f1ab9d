// The store's requests as a transport decodes them, one type per call whatever the wire form
// (server/parameter_store.h takes these): a header message whose payload the store does not read
// from it, and views of the payload as received. The raw gRPC transport (server/ps_service.h)
// views the received bytes (DecodedPush::Of(IncomingPush)); a message built in memory, whose
// chunks and entries carry their own data (tests, tools, the in-process transport), is viewed by
// InMemoryPush / InMemoryPull.
//
//   DecodedPush   Push and PushPull: header, chunk i's data, embedding-row gradients, pull keys
//   DecodedPull   Pull: header, embedding keys
//   PullAnswer    where an answer goes: the header, the values (flat), the rows (one buffer)
//
// Everything here is borrowed: the views must stay valid until the store's call returns (the
// store copies what it keeps: a SYNC gradient, the keys of a parked answer); a PullAnswer's
// pointers until the call's `done` runs.
#ifndef PSTRAIN_SERVER_STORE_REQUEST_H_
#define PSTRAIN_SERVER_STORE_REQUEST_H_

#include <vector>

#include "absl/types/span.h"
#include "common/payload_view.h"
#include "common/tensor_messages.h"
#include "proto/ps.pb.h"

namespace pstrain::server {

// A push (Push or PushRequest of PushPull). `header`'s chunks carry tensor_id, offset, length and
// encoding; their data is values[i]. `rows` are PushRequest.sparse and `pull_keys`
// PushRequest.pull_sparse; the header's own entries of those fields are not read.
// REQUIRES: values.size() == header.chunks_size().
struct DecodedPush {
  const PushRequest& header;
  absl::Span<const PayloadView> values;
  absl::Span<const IncomingRows> rows;
  absl::Span<const IncomingRows> pull_keys;

  // A push as the raw transport received it (common/tensor_messages.h); borrows `push`.
  static DecodedPush Of(const IncomingPush& push) {
    return DecodedPush{push.header, push.values, push.sparse, push.pull_sparse};
  }
};

// A pull. `keys` are PullRequest.sparse; the header's own entries are not read.
struct DecodedPull {
  const PullRequest& header;
  absl::Span<const IncomingRows> keys;

  // A pull as the raw transport received it; borrows `pull`.
  static DecodedPull Of(const IncomingPullRequest& pull) { return DecodedPull{pull.header, pull.sparse}; }
};

// Where an answer goes. `values` non-null: the chunks' values go there, back to back (room for
// every float the answer covers: ParameterStore::num_elements() for a pull, the pushed chunks'
// floats for a PushPull), and resp's chunks carry no data. `rows` non-null: the embedding rows go
// there (one pooled buffer the raw transport sends as it is) instead of resp->sparse. A storage
// that writes values advances `values` past them, so the next storage's follow.
struct PullAnswer {
  PullResponse* resp = nullptr;
  float* values = nullptr;
  OutgoingRowsAnswer* rows = nullptr;
};

// A PushRequest held in memory, its chunks' data (or `values`) and its sparse entries viewed in
// place. Borrows `req` (and `values`); not copyable, since the view points into it.
class InMemoryPush {
 public:
  explicit InMemoryPush(const PushRequest& req);
  InMemoryPush(const PushRequest& req, absl::Span<const PayloadView> values);
  InMemoryPush(const InMemoryPush&) = delete;
  InMemoryPush& operator=(const InMemoryPush&) = delete;

  const DecodedPush& decoded() const { return decoded_; }

 private:
  std::vector<PayloadView> own_values_;  // the chunks' data, when no `values` were given
  const std::vector<IncomingRows> rows_;
  const std::vector<IncomingRows> pull_keys_;
  const DecodedPush decoded_;
};

// A PullRequest held in memory, its sparse entries viewed in place. Borrows `req`.
class InMemoryPull {
 public:
  explicit InMemoryPull(const PullRequest& req);
  InMemoryPull(const InMemoryPull&) = delete;
  InMemoryPull& operator=(const InMemoryPull&) = delete;

  const DecodedPull& decoded() const { return decoded_; }

 private:
  const std::vector<IncomingRows> keys_;
  const DecodedPull decoded_;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_STORE_REQUEST_H_
