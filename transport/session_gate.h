// What a listener asks of a call's session credential before it reads the call's request.
//
// With TLS, a listener's transport authentication step (transport/transport_security.h) sees each
// call's metadata, path included, before a byte of its request is read. A role hands it a gate so
// that a call without a valid session credential (common/session_credential.h) for a method that
// needs one is refused there, costing no payload buffer and no handler. The handlers check the
// same credentials again, and the rank a request names, in every transport (plaintext loopback
// has no authentication step).
#ifndef PSTRAIN_TRANSPORT_SESSION_GATE_H_
#define PSTRAIN_TRANSPORT_SESSION_GATE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "transport/peer_role.h"

namespace pstrain {

// The path prefix of gRPC's health service, which every listener serves and no gate asks a
// session of (probes and load balancers call it).
inline constexpr absl::string_view kHealthServicePrefix = "/grpc.health.v1.Health/";

class SessionGate {
 public:
  virtual ~SessionGate() = default;

  // OK to let the call of `method` (its path, "/pstrain.Scheduler/Leave") with `credential`
  // (empty when it carries none), from `peer` (its certificate's role, transport/peer_role.h), on to
  // its handler; otherwise the refusal, UNAUTHENTICATED or PERMISSION_DENIED with a message
  // naming the method. Called on gRPC's threads for every call: must be thread-safe and must not
  // block beyond a short mutex.
  virtual absl::Status Admit(absl::string_view method, absl::string_view credential, const Peer& peer) const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_SESSION_GATE_H_
