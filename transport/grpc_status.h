// The one mapping between absl::Status and grpc::Status. Codes share their numbering, so the
// mapping is exact in both directions; messages pass through unchanged.
#ifndef PSTRAIN_TRANSPORT_GRPC_STATUS_H_
#define PSTRAIN_TRANSPORT_GRPC_STATUS_H_

#include "absl/strings/string_view.h"

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace pstrain {

// Trailing metadata of a RESOURCE_EXHAUSTED answer that may be retried: the milliseconds to wait
// first (decimal). Without it, RESOURCE_EXHAUSTED is final (e.g. gRPC's own message size limit).
inline constexpr char kRetryAfterMsKey[] = "pstrain-retry-after-ms";

grpc::Status ToGrpcStatus(const absl::Status& status);

// `context` (e.g. "pull from server 1 at 127.0.0.1:4001") is prefixed to the message so a caller
// can return the result as is and the reader knows which call failed.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context = {});

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_GRPC_STATUS_H_
