// The transport-security flags every listening or dialling binary takes (transport/transport_security.h
// says what each does): --tls_cert, --tls_key, --tls_ca, --tls_server_name, --job_token_file and
// --insecure, also as PSTRAIN_TLS_CERT etc. in the environment.
//
// Only binaries link this (library `pstrain_security_flags`): libraries take a TransportSecurity.
#ifndef PSTRAIN_TRANSPORT_SECURITY_FLAGS_H_
#define PSTRAIN_TRANSPORT_SECURITY_FLAGS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "transport/transport_security.h"

namespace pstrain {

// The options the flags give. Call after gflags has parsed the command line.
TransportSecurityOptions TransportSecurityOptionsFromFlags();

// TransportSecurity::Create of those options (INVALID_ARGUMENT naming the flag).
absl::StatusOr<std::shared_ptr<const TransportSecurity>> TransportSecurityFromFlags();

// The same for a binary's main(): on a bad flag prints "<binary>: <message>" to stderr and exits 2,
// as every binary does for bad flags. pstrain-scheduler, pstrain-server and pstrain-worker act as
// their role (TransportSecurityOptions::role): --tls_cert must be that role's certificate.
std::shared_ptr<const TransportSecurity> TransportSecurityFromFlagsOrExit(const char* binary);

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_SECURITY_FLAGS_H_
