// Throwaway credentials for one job: a fresh CA, one certificate it signs, and a random job token,
// written as PEM and text files. pstrain-launch makes them for every local job, so the demo runs
// with mutual TLS and a token without any command of the user's; tests make them to start secured
// clusters (and, with a second call, credentials of a stranger the job's CA never signed).
//
// The CA's private key is never written: once the certificate is signed nobody can sign another,
// so a job's credentials cannot be extended to anyone else.
//
// Thread safety: pure functions (files aside).
#ifndef PSTRAIN_COMMON_JOB_CREDENTIALS_H_
#define PSTRAIN_COMMON_JOB_CREDENTIALS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/transport_security.h"

namespace pstrain {

struct JobCredentialOptions {
  // Subject alternative names of the certificate: `server_name` as a DNS name, plus 127.0.0.1 and
  // ::1 as IP addresses.
  std::string server_name = "pstrain";
  absl::Duration valid_for = absl::Hours(24 * 7);
};

// Writes DIR/ca.pem, DIR/cert.pem, DIR/key.pem (mode 0600) and DIR/token (mode 0600; 64 hex
// characters from the system's random source) and returns the options that use them. `dir` must
// exist. INTERNAL when OpenSSL fails, with its error; the file system's errors otherwise.
absl::StatusOr<TransportSecurityOptions> MakeJobCredentials(const std::string& dir,
                                                            const JobCredentialOptions& options = {});

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_CREDENTIALS_H_
