// Throwaway credentials for one job: a fresh CA, one certificate (and key) it signs for each role
// (transport/peer_role.h: the role is the certificate's spiffe://pstrain/<job>/<role> URI), and a
// random job token, written as PEM and text files. pstrain-launch makes them for every local job,
// so the demo runs with mutual TLS, per-role certificates and a token without any command of the
// user's; tests make them to start secured clusters (and, with a second call, credentials of a
// stranger the job's CA never signed).
//
// The folder's layout (also what deploy/k8s/tools/make-tls-secret.sh writes, one folder per role):
//
//   ca.pem  token  scheduler.pem scheduler-key.pem  server.pem server-key.pem
//                  worker.pem worker-key.pem        operator.pem operator-key.pem
//
// Each role gets only its own certificate and key: a worker's files cannot register a server.
// The CA's private key is never written: once the certificates are signed nobody can sign
// another, so a job's credentials cannot be extended to anyone else.
//
// Thread safety: pure functions (files aside).
#ifndef PSTRAIN_TRANSPORT_JOB_CREDENTIALS_H_
#define PSTRAIN_TRANSPORT_JOB_CREDENTIALS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/peer_role.h"
#include "transport/transport_security.h"

namespace pstrain {

struct JobCredentialOptions {
  // Subject alternative names of every certificate: `server_name` as a DNS name, 127.0.0.1 and ::1
  // as IP addresses, and the role's URI.
  std::string server_name = "pstrain";
  // The <job> of each role URI: a label for people (letters, digits, '-', '.', '_').
  std::string job = "job";
  absl::Duration valid_for = absl::Hours(24 * 7);
};

// A folder of one job's credentials in the layout above.
struct JobCredentials {
  std::string dir;
  std::string server_name = "pstrain";

  // The options a process of `role` runs with: the CA, the token, and that role's certificate
  // and key. REQUIRES: role != CertRole::kNone.
  TransportSecurityOptions For(CertRole role) const;
};

// Writes the layout above into `dir` (which must exist), every file mode 0600 (the token: 64 hex
// characters from the system's random source). INTERNAL when OpenSSL fails, with its error;
// INVALID_ARGUMENT for a bad `job` label; the file system's errors otherwise.
absl::StatusOr<JobCredentials> MakeJobCredentials(const std::string& dir, const JobCredentialOptions& options = {});

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_JOB_CREDENTIALS_H_
