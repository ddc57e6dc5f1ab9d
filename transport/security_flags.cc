#include "transport/security_flags.h"

#include <cstdlib>
#include <iostream>
#include <utility>

#include <gflags/gflags.h>

#include "absl/strings/string_view.h"

DEFINE_string(
    tls_cert, "",
    "PEM certificate of this role, signed by --tls_ca (with --tls_key and --tls_ca: mutual TLS). Each role has "
    "its own, carrying its role as the URI spiffe://pstrain/<job>/<role> (scheduler, server, worker, "
    "operator, serving): a worker certificate cannot register a server");
DEFINE_string(tls_key, "", "PEM private key of --tls_cert");
DEFINE_string(tls_ca, "", "PEM certificate of the job's CA: peers must present a certificate it signed");
DEFINE_string(tls_server_name, "pstrain",
              "The name (subject alternative name) every role's certificate carries, checked by clients");
DEFINE_string(job_token_file, "", "File holding the job token, sent and checked on every call (needs TLS)");
DEFINE_bool(insecure, false,
            "Plaintext and no token, on any address: only for a network you trust. Without TLS flags and without "
            "--insecure a role listens only on loopback addresses");

namespace pstrain {

TransportSecurityOptions TransportSecurityOptionsFromFlags() {
  TransportSecurityOptions options;
  options.cert_file = FLAGS_tls_cert;
  options.key_file = FLAGS_tls_key;
  options.ca_file = FLAGS_tls_ca;
  options.server_name = FLAGS_tls_server_name;
  options.token_file = FLAGS_job_token_file;
  options.insecure = FLAGS_insecure;
  return options;
}

absl::StatusOr<std::shared_ptr<const TransportSecurity>> TransportSecurityFromFlags() {
  return TransportSecurity::Create(TransportSecurityOptionsFromFlags());
}

std::shared_ptr<const TransportSecurity> TransportSecurityFromFlagsOrExit(const char* binary) {
  TransportSecurityOptions options = TransportSecurityOptionsFromFlags();
  const absl::string_view name = binary;
  if (name == "pstrain-scheduler") options.role = CertRole::kScheduler;
  if (name == "pstrain-server") options.role = CertRole::kServer;
  if (name == "pstrain-worker") options.role = CertRole::kWorker;
  if (name == "pstrain-serve") options.role = CertRole::kServing;
  if (name == "pstrain-ctl") options.role = CertRole::kOperator;
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> security = TransportSecurity::Create(options);
  if (!security.ok()) {
    std::cerr << binary << ": " << security.status().message() << "\n";
    std::exit(2);
  }
  return *std::move(security);
}

}  // namespace pstrain
