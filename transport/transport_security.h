// How a role's gRPC channels and listeners are secured: mutual TLS against the job's CA, and the
// job token on every call.
//
// With TLS (--tls_cert, --tls_key, --tls_ca):
//   - every listener asks for and verifies the peer's certificate against the CA, so a client
//     without a certificate the job's CA signed never gets past the handshake;
//   - every channel verifies the server's certificate against the same CA and checks that it names
//     `server_name` (a subject alternative name; "pstrain" unless --tls_server_name says
//     otherwise), so one certificate can serve any address a role is reached at;
//   - certificate, key and CA are re-read when their files change (gRPC's file watcher, every
//     `reload_interval`), so a rotated Kubernetes Secret takes effect without a restart;
//   - with a job token (--job_token_file), channels send it as "authorization: Bearer <token>" and
//     listeners refuse a call without it (UNAUTHENTICATED) before the request is read, in the
//     transport's authentication step.
// On a unix domain socket (same host) TLS gives way to gRPC's local credentials: no encryption,
// since a process that can read this host's socket traffic can read the key files too, but the
// same job token and session checks on every call. Such a socket must sit in a folder that only
// this user can enter (owned by it, no group or other permissions), so no other user's process
// can even connect; PrivateSocketDir makes one.
// Without TLS, traffic is plaintext and unauthenticated, so a listener is allowed only on a
// loopback address (127.0.0.0/8, ::1, localhost, a unix socket) unless `insecure` says the
// network is trusted. A job token without TLS is refused: it would travel in the clear.
//
// Thread safety: immutable after Create; shared by every channel and listener of a process.
#ifndef PSTRAIN_TRANSPORT_TRANSPORT_SECURITY_H_
#define PSTRAIN_TRANSPORT_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/peer_role.h"
#include "transport/session_gate.h"

namespace pstrain {

struct TransportSecurityOptions {
  // PEM files; all three or none.
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  // The name every role's certificate carries as a subject alternative name, checked by clients.
  std::string server_name = "pstrain";
  // A file holding the job token (surrounding whitespace ignored); empty: no token.
  std::string token_file;
  // Plaintext on any address (no TLS flags given). Refused together with TLS flags.
  bool insecure = false;
  // The role this process acts as (transport/peer_role.h). With TLS, Create refuses a --tls_cert
  // that does not carry it. kNone: not checked (a tool that acts as nobody). Not a flag: each
  // binary knows its role.
  CertRole role = CertRole::kNone;
  absl::Duration reload_interval = absl::Seconds(10);
};

class TransportSecurity {
 public:
  // Checks the options: TLS files all or none and readable (a PEM certificate, key and CA), the
  // token file readable and non-empty, no token without TLS, not both TLS and `insecure`, and
  // --tls_cert for `role` when one is set. INVALID_ARGUMENT naming the flag and what was expected.
  static absl::StatusOr<std::shared_ptr<const TransportSecurity>> Create(const TransportSecurityOptions& options);

  // Plaintext, loopback only: what in-process tests and benchmarks use.
  static std::shared_ptr<const TransportSecurity> Loopback();

  bool tls() const { return !options_.cert_file.empty(); }
  bool has_token() const { return !token_.empty(); }
  const TransportSecurityOptions& options() const { return options_; }

  // Credentials for a listener on `address` (host:port, or unix:PATH). FAILED_PRECONDITION for a
  // plaintext listener on a non-loopback address without `insecure`, saying how to fix it, and,
  // with TLS, for a unix socket whose folder other users may enter. With TLS, `gate` (may be null;
  // borrowed, it must outlive the listener) judges every call's session credential after the
  // token and before the request is read (transport/session_gate.h).
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(absl::string_view address,
                                                                             const SessionGate* gate = nullptr) const;

  // Credentials for a channel to `address`, with the token attached to every call: TLS, or local
  // credentials for a unix: address. With TLS and `peer` set, the handshake fails unless the
  // peer's certificate is for that role (and names `server_name`); kNone: any role of the job.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(absl::string_view address,
                                                               CertRole peer = CertRole::kNone) const;

  // Sets what a channel needs besides its credentials (the name checked in the server's
  // certificate). Call on every channel's arguments.
  void ConfigureChannel(grpc::ChannelArguments* args) const;

  // A channel to `address` (a process of role `peer`, kNone: any) with ChannelCredentials and
  // ConfigureChannel applied to `args`.
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, grpc::ChannelArguments args,
                                            CertRole peer = CertRole::kNone) const;

 private:
  explicit TransportSecurity(TransportSecurityOptions options, std::string token)
      : options_(std::move(options)), token_(std::move(token)) {}

  TransportSecurityOptions options_;
  std::string token_;
};

// The flags (--tls_cert=..., --insecure) that give a child process `options`, file paths made
// absolute so the child may run in another folder; and the same as environment variables
// (PSTRAIN_TLS_CERT=...), for a worker command that is not a pstrain binary.
std::vector<std::string> TransportSecurityFlags(const TransportSecurityOptions& options);
std::vector<std::pair<std::string, std::string>> TransportSecurityEnvironment(const TransportSecurityOptions& options);

// True for 127.0.0.0/8, ::1, localhost (with or without a port, brackets allowed) and unix: paths.
bool IsLoopbackAddress(absl::string_view address);

// Makes (or takes over) `parent`/`name`, a folder for this process's unix sockets that only its
// user can enter (mode 0700, owned by the effective user), and returns its path. INVALID_ARGUMENT
// when `parent` is missing or not writable, FAILED_PRECONDITION when `parent`/`name` exists but
// is not a folder of this user's or others may enter it.
absl::StatusOr<std::string> PrivateSocketDir(const std::string& parent, const std::string& name);

// OK when `dir` is a folder owned by the effective user that no group or other user may enter;
// otherwise FAILED_PRECONDITION saying what is wrong and how to fix it.
absl::Status CheckPrivateDir(const std::string& dir);

}  // namespace pstrain

#endif  // PSTRAIN_TRANSPORT_TRANSPORT_SECURITY_H_
