// Session credentials (common/session_credential.h) on the wire: call metadata "pstrain-session".
// The gRPC side of session credentials; the credentials themselves know nothing of gRPC.
#ifndef PSTRAIN_TRANSPORT_SESSION_METADATA_H_
#define PSTRAIN_TRANSPORT_SESSION_METADATA_H_

#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/string_view.h"
#include "common/session_credential.h"

namespace pstrain {

// The credential a call carries; empty when it carries none. The view borrows the call's
// metadata: it lives as long as the call.
inline absl::string_view SessionCredentialOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kSessionMetadataKey);
  if (it == metadata.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

// Sends `credential` with the call (nothing when it is empty: a role before Register).
inline void AttachSession(grpc::ClientContext* context, const std::string& credential) {
  if (!credential.empty()) context->AddMetadata(kSessionMetadataKey, credential);
}

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_SESSION_METADATA_H_
