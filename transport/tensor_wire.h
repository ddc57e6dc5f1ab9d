// The hot path's wire codec: PushRequest and PullResponse (proto/ps.proto) with tensor values that
// are never copied into protobuf strings.
//
// The bytes on the wire are exactly the protobuf encoding of those messages, so any protobuf
// client can speak to a server (tests/py_client does); only the C++ ends avoid the copies:
//
//   PushRequest  = its scalar fields | for each chunk: field 7 (LEN) { tensor_id, offset, length,
//                                            [encoding,] field 4 (LEN) = length x float32 LE }
//   PullResponse = step             | for each chunk: field 2 (LEN) { the same TensorChunk }
//                                    | for each table: field 3 (LEN) { table_id, field 2 (LEN) = keys,
//                                                                      field 3 (LEN) = rows }
//   PushRequest also carries fields 25 and 26 (SparseRows, as in PullResponse), PullRequest field 11.
//
// Embedding rows (SparseRows) travel like tensor values: their keys and rows are slices of the
// caller's memory or of a pooled buffer on the way out, and PayloadViews on the way in
// (IncomingRows), so a server checks keys and copies row gradients straight from the received
// bytes, and a worker scatters pulled rows straight from them.
//
// A push whose gradient is compressed (common/chunk_codec.h) sets the chunk's encoding, and its
// data holds the encoded bytes; the codec carries them the same way, whatever they are.
//
// Sending, each chunk's values go out as a gRPC slice that points at the caller's floats (zero
// copies in user space) or at a pooled buffer (common/buffer_pool.h). Receiving, the message is
// walked in place over the slices gRPC received: the scalar fields and chunk headers are parsed
// into a `header` message whose chunks carry no data, and each chunk's values become a
// PayloadView into the received bytes, which the consumer copies once, straight to where they
// belong (the server's gradient buffer, the worker's weights).
#ifndef PSTRAIN_TRANSPORT_TENSOR_WIRE_H_
#define PSTRAIN_TRANSPORT_TENSOR_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/buffer_pool.h"
#include "common/payload_view.h"
#include "common/tensor_messages.h"
#include "proto/ps.pb.h"

namespace pstrain {

// Encodes `push` into `out` (zero-copy: see OutgoingPush).
// REQUIRES: push.values.size() == push.header.chunks_size(), and the header's chunks carry no data.
void EncodePush(const OutgoingPush& push, grpc::ByteBuffer* out);

// Encodes a PullResponse whose chunks carry no data; chunk i's values are the next
// 4 * chunks(i).length() bytes of `values`, which the encoded message takes over (the buffer goes
// back to its pool once gRPC has sent it). `rows`' entries follow the header's own
// PullResponse.sparse entries (normally none) as more of them; the message takes over its buffer
// too.
// REQUIRES: values holds at least the sum of the chunk lengths, in floats; rows' ranges lie
// within rows.bytes.
void EncodePull(const PullResponse& header, PooledBuffer values, grpc::ByteBuffer* out);
void EncodePull(const PullResponse& header, PooledBuffer values, OutgoingRowsAnswer rows, grpc::ByteBuffer* out);

// Decodes a received message. INVALID_ARGUMENT (`what` first, then what is wrong and at which
// byte) for bytes that are not a valid encoding: a truncated varint or field, a group, a chunk
// that is not a message. The header's chunks carry no data; values.size() == chunks_size() (a
// chunk without data gets an empty view). The ByteBuffer need not outlive the result.
absl::Status DecodePush(const grpc::ByteBuffer& in, absl::string_view what, IncomingPush* out);
absl::Status DecodePull(const grpc::ByteBuffer& in, absl::string_view what, IncomingPull* out);
// A PullRequest, its sparse entries' keys as views (no chunks there). Errors as above.
absl::Status DecodePullRequest(const grpc::ByteBuffer& in, absl::string_view what, IncomingPullRequest* out);

// Messages without tensors (PushResponse; PullRequest on the worker's side, whose keys are a
// small part of a pull's bytes) go through protobuf as usual.
void EncodeMessage(const google::protobuf::MessageLite& message, grpc::ByteBuffer* out);
// INVALID_ARGUMENT "<what>: not a valid <type>" when the bytes do not parse.
absl::Status DecodeMessage(const grpc::ByteBuffer& in, absl::string_view what, google::protobuf::MessageLite* out);

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_TENSOR_WIRE_H_
