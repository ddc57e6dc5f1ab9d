// Which role of the job a certificate is for, and what a call's transport says of its peer.
//
// Every certificate the job's CA issues carries exactly one role, as a URI subject alternative
// name (a SPIFFE ID):
//
//   spiffe://pstrain/<job>/<role>      <role>: scheduler | server | worker | operator | serving
//
// <job> is a label (pstrain-launch uses the temp folder's name; the Kubernetes script the job's
// name); it only helps a person tell jobs apart, since each job has its own CA. The role is what
// the peer checks: the scheduler lets only a server certificate register or act as a server, and
// only a worker certificate register or act as a worker; a server serves only worker
// certificates; workers and servers dial only a scheduler that presents the scheduler
// certificate, and workers only servers that present a server certificate.
//
// A certificate with no role URI (one shared certificate, as deployments made before per-role
// credentials) or with several is refused for all of that: it still opens the calls that act as
// nobody (GetJobStatus, GetClusterView, GetInitialModel, gRPC health).
//
// On a unix socket (same host, gRPC local credentials) there is no certificate: the socket's
// folder admits this user only, and the job token and session gate still apply. Plaintext
// (loopback or --insecure) has no certificate either. Neither is checked for a role.
//
// Thread safety: pure functions.
#ifndef PSTRAIN_TRANSPORT_PEER_ROLE_H_
#define PSTRAIN_TRANSPORT_PEER_ROLE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class AuthContext;
}

namespace pstrain {

enum class CertRole { kNone, kScheduler, kServer, kWorker, kOperator, kServing };

// "scheduler", "server", "worker", "operator", "serving"; "no role" for kNone.
absl::string_view CertRoleName(CertRole role);

// kNone for a name that is no role.
CertRole CertRoleFromName(absl::string_view name);

// The roles a job's CA issues a certificate for, in this order.
inline constexpr CertRole kCertRoles[] = {CertRole::kScheduler, CertRole::kServer, CertRole::kWorker,
                                          CertRole::kOperator, CertRole::kServing};

// "spiffe://pstrain/<job>/<role>". REQUIRES: role != kNone, `job` a non-empty URI path segment.
std::string CertRoleUri(absl::string_view job, CertRole role);

// The role carried by a certificate's URI subject alternative names `uris`: the one of the form
// spiffe://pstrain/<job>/<role>. kNone when there is none, or several (ambiguous: refused as none).
CertRole CertRoleFromUris(const std::vector<std::string>& uris);

// The same for a PEM certificate (the first one in `pem`). INVALID_ARGUMENT when `pem` holds no
// certificate.
absl::StatusOr<CertRole> CertRoleOfPem(absl::string_view pem);

// What a call's transport says of its peer.
struct Peer {
  // False on a unix socket (local credentials) and on plaintext: no certificate to check.
  bool has_certificate = false;
  // With a certificate: the role it carries (kNone: none, or several).
  CertRole role = CertRole::kNone;
};

// The peer of a call or connection whose auth context is `context` (may be null: plaintext).
Peer PeerOf(const grpc::AuthContext* context);

// OK when `peer` may act as `needed`: it presents a certificate for that role, or has no
// certificate at all (unix socket or plaintext). Otherwise PERMISSION_DENIED:
//   "<what>: the peer's certificate is for role worker; a server needs the job's server
//    certificate (--tls_cert)"
absl::Status CheckPeerRole(const Peer& peer, CertRole needed, absl::string_view what);

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_PEER_ROLE_H_
