#include "transport/transport_security.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "transport/grpc_status.h"
#include "common/session_credential.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr char kTokenHeader[] = "authorization";
constexpr char kBearer[] = "Bearer ";

// Refuses, before the request is read, a call that does not carry the job token. Runs inline on
// the transport's thread (IsBlocking false): a comparison needs no thread of its own.
// The transport's authentication step for every call, before its request is read: the job token
// (when the job has one), then the session gate (when the listener has one).
class CallChecker final : public grpc::AuthMetadataProcessor {
 public:
  // `token` empty: no token check. `gate` may be null; borrowed, it outlives the listener.
  CallChecker(const std::string& token, const SessionGate* gate)
      : expected_(token.empty() ? "" : absl::StrCat(kBearer, token)), gate_(gate) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context, OutputMetadata* consumed,
                       OutputMetadata* /*response*/) override {
    if (!expected_.empty()) {
      if (grpc::Status s = CheckToken(metadata, consumed); !s.ok()) return s;
    }
    if (gate_ == nullptr) return grpc::Status::OK;
    auto path = metadata.find(":path");
    auto session = metadata.find(kSessionMetadataKey);
    const absl::Status admitted = gate_->Admit(
        path == metadata.end() ? absl::string_view() : absl::string_view(path->second.data(), path->second.size()),
        session == metadata.end() ? absl::string_view()
                                  : absl::string_view(session->second.data(), session->second.size()),
        PeerOf(context));
    return ToGrpcStatus(admitted);
  }

 private:
  grpc::Status CheckToken(const InputMetadata& metadata, OutputMetadata* consumed) const {
    auto it = metadata.find(kTokenHeader);
    if (it == metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "no job token: the call has no 'authorization' metadata (give the caller the job's "
                          "--job_token_file)");
    }
    const grpc::string_ref& got = it->second;
    // Constant time, so the comparison's duration tells nothing about the token.
    if (got.size() != expected_.size() || CRYPTO_memcmp(got.data(), expected_.data(), expected_.size()) != 0) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "wrong job token: the call's token is not this job's (check --job_token_file)");
    }
    // Consumed: handlers never see the token, so no log of metadata can leak it.
    consumed->insert(std::make_pair(std::string(kTokenHeader), std::string(got.data(), got.size())));
    return grpc::Status::OK;
  }

  const std::string expected_;
  const SessionGate* const gate_;
};

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreDeleter {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxDeleter {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};

absl::StatusOr<std::string> ReadPem(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, absl::StrCat("--", flag), kMaxFlagFileBytes);
  if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": not a PEM file (no '-----BEGIN' line)"));
  }
  return text;
}

std::unique_ptr<BIO, BioDeleter> MemoryBio(const std::string& text) {
  return std::unique_ptr<BIO, BioDeleter>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Parses the three files and checks that they belong together: the key is the certificate's and
// the CA signed the certificate. A mismatch would otherwise show up only as a failed handshake
// on the other end, far from its cause.
absl::Status CheckTlsFiles(const TransportSecurityOptions& o) {
  ASSIGN_OR_RETURN(std::string cert_pem, ReadPem("tls_cert", o.cert_file));
  ASSIGN_OR_RETURN(std::string key_pem, ReadPem("tls_key", o.key_file));
  ASSIGN_OR_RETURN(std::string ca_pem, ReadPem("tls_ca", o.ca_file));
  std::unique_ptr<X509, X509Deleter> cert(PEM_read_bio_X509(MemoryBio(cert_pem).get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_cert=", o.cert_file, ": no X.509 certificate in it"));
  }
  std::unique_ptr<EVP_PKEY, KeyDeleter> key(
      PEM_read_bio_PrivateKey(MemoryBio(key_pem).get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key=", o.key_file, ": no private key in it (or one protected by a passphrase)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key=", o.key_file, " is not the key of --tls_cert=", o.cert_file));
  }
  std::unique_ptr<X509_STORE, StoreDeleter> store(X509_STORE_new());
  std::unique_ptr<BIO, BioDeleter> ca_bio = MemoryBio(ca_pem);
  int cas = 0;
  while (X509* ca = PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store.get(), ca);
    X509_free(ca);
    ++cas;
  }
  if (cas == 0) return absl::InvalidArgumentError(absl::StrCat("--tls_ca=", o.ca_file, ": no X.509 certificate in it"));
  std::unique_ptr<X509_STORE_CTX, StoreCtxDeleter> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr);
  if (X509_verify_cert(ctx.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_cert=", o.cert_file,
                                                   " does not verify against --tls_ca=", o.ca_file, ": ",
                                                   X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()))));
  }
  if (o.role != CertRole::kNone) {
    ASSIGN_OR_RETURN(const CertRole carried, CertRoleOfPem(cert_pem));
    if (carried != o.role) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_cert=", o.cert_file, " is ",
                       carried == CertRole::kNone ? "a certificate with no role"
                                                  : absl::StrCat("the ", CertRoleName(carried), " certificate"),
                       "; this process is a ", CertRoleName(o.role), " and needs the job's ", CertRoleName(o.role),
                       " certificate (its URI spiffe://pstrain/<job>/", CertRoleName(o.role),
                       "; pstrain-launch and deploy/k8s/tools/make-tls-secret.sh issue one per role)"));
    }
  }
  return absl::OkStatus();
}

// The check a channel makes of the certificate a peer presents, after gRPC has verified it
// against the job's CA: that it names `server_name` (what gRPC's own host name check would do)
// and carries role `role`. Synchronous: string comparisons only.
class RoleVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  RoleVerifier(std::string server_name, CertRole role) : server_name_(std::move(server_name)), role_(role) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    bool named = false;
    for (const grpc::string_ref& dns : request->dns_names()) named |= dns == server_name_;
    std::vector<std::string> uris;
    for (const grpc::string_ref& uri : request->uri_names()) uris.emplace_back(uri.data(), uri.size());
    const CertRole carried = CertRoleFromUris(uris);
    if (!named) {
      *sync_status =
          grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                       absl::StrCat("the peer's certificate does not name '", server_name_, "' (--tls_server_name)"));
    } else if (carried != role_) {
      *sync_status = grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          absl::StrCat("the peer's certificate is for ", carried == CertRole::kNone ? "no role" : CertRoleName(carried),
                       "; expected the job's ", CertRoleName(role_), " certificate"));
    } else {
      *sync_status = grpc::Status::OK;
    }
    return true;
  }

  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest* /*request*/) override {}

 private:
  const std::string server_name_;
  const CertRole role_;
};

std::shared_ptr<grpc::experimental::CertificateProviderInterface> FileProvider(const TransportSecurityOptions& o) {
  const auto seconds = static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(o.reload_interval)));
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(o.key_file, o.cert_file, o.ca_file,
                                                                              seconds);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> TransportSecurityEnvironment(const TransportSecurityOptions& options) {
  auto absolute = [](const std::string& path) {
    std::error_code error;
    std::filesystem::path p = std::filesystem::absolute(path, error);
    return error ? path : p.string();
  };
  std::vector<std::pair<std::string, std::string>> env;
  if (!options.cert_file.empty()) {
    env.emplace_back("PSTRAIN_TLS_CERT", absolute(options.cert_file));
    env.emplace_back("PSTRAIN_TLS_KEY", absolute(options.key_file));
    env.emplace_back("PSTRAIN_TLS_CA", absolute(options.ca_file));
    env.emplace_back("PSTRAIN_TLS_SERVER_NAME", options.server_name);
  }
  if (!options.token_file.empty()) env.emplace_back("PSTRAIN_JOB_TOKEN_FILE", absolute(options.token_file));
  if (options.insecure) env.emplace_back("PSTRAIN_INSECURE", "true");
  return env;
}

std::vector<std::string> TransportSecurityFlags(const TransportSecurityOptions& options) {
  std::vector<std::string> flags;
  for (const auto& [name, value] : TransportSecurityEnvironment(options)) {
    // PSTRAIN_TLS_CERT -> --tls_cert, as common/binary_init.h maps them the other way.
    const std::string flag = absl::StrCat("--", absl::AsciiStrToLower(absl::StripPrefix(name, "PSTRAIN_")));
    flags.push_back(value == "true" ? flag : absl::StrCat(flag, "=", value));
  }
  return flags;
}

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:")) return true;
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  }
  return host == "::1" || absl::EqualsIgnoreCase(host, "localhost") || absl::StartsWith(host, "127.");
}

absl::StatusOr<std::shared_ptr<const TransportSecurity>> TransportSecurity::Create(
    const TransportSecurityOptions& options) {
  const int given = !options.cert_file.empty() + !options.key_file.empty() + !options.ca_file.empty();
  if (given != 0 && given != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS needs all of --tls_cert, --tls_key and --tls_ca; got", options.cert_file.empty() ? "" : " --tls_cert",
        options.key_file.empty() ? "" : " --tls_key", options.ca_file.empty() ? "" : " --tls_ca", " only"));
  }
  if (given == 3 && options.insecure) {
    return absl::InvalidArgumentError("--insecure and --tls_cert/--tls_key/--tls_ca contradict each other: give one");
  }
  if (given == 3) {
    RETURN_IF_ERROR(CheckTlsFiles(options));
    if (options.server_name.empty()) return absl::InvalidArgumentError("--tls_server_name is empty");
  }
  std::string token;
  if (!options.token_file.empty()) {
    if (given == 0) {
      return absl::InvalidArgumentError(
          "--job_token_file needs TLS (--tls_cert, --tls_key, --tls_ca): without it the token would travel in the "
          "clear");
    }
    absl::StatusOr<std::string> text = ReadWholeFile(options.token_file, "--job_token_file", kMaxFlagFileBytes);
    if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
    token = std::string(absl::StripAsciiWhitespace(*text));
    if (token.size() < 16) {
      return absl::InvalidArgumentError(absl::StrCat("--job_token_file=", options.token_file, ": the token has ",
                                                     token.size(), " characters, expected at least 16"));
    }
    for (char c : token) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat("--job_token_file=", options.token_file,
                                                       ": the token must be printable ASCII without spaces"));
      }
    }
  }
  return std::shared_ptr<const TransportSecurity>(new TransportSecurity(options, std::move(token)));
}

std::shared_ptr<const TransportSecurity> TransportSecurity::Loopback() {
  static const auto* loopback =
      new std::shared_ptr<const TransportSecurity>(new TransportSecurity(TransportSecurityOptions{}, std::string()));
  return *loopback;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TransportSecurity::ServerCredentials(
    absl::string_view address, const SessionGate* gate) const {
  if (tls() && absl::StartsWith(address, "unix:")) {
    // Same host: the folder keeps other users out, the token and the gate every caller without
    // the job's credentials; nothing is encrypted (see the class comment).
    const std::string path(absl::StripPrefix(address, "unix:"));
    RETURN_IF_ERROR(CheckPrivateDir(std::filesystem::path(path).parent_path().string()));
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::experimental::LocalServerCredentials(UDS);
    if (has_token() || gate != nullptr) {
      credentials->SetAuthMetadataProcessor(std::make_shared<CallChecker>(token_, gate));
    }
    return credentials;
  }
  if (!tls()) {
    if (!options_.insecure && !IsLoopbackAddress(address)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to listen on ", address,
          " without TLS: anyone who reaches it could read and overwrite the job. Give --tls_cert, --tls_key and "
          "--tls_ca (and --job_token_file), listen on 127.0.0.1, or pass --insecure on a trusted network"));
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::experimental::TlsServerCredentialsOptions tls(FileProvider(options_));
  tls.watch_root_certs();
  tls.watch_identity_key_cert_pairs();
  tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::experimental::TlsServerCredentials(tls);
  if (has_token() || gate != nullptr)
    credentials->SetAuthMetadataProcessor(std::make_shared<CallChecker>(token_, gate));
  return credentials;
}

std::shared_ptr<grpc::ChannelCredentials> TransportSecurity::ChannelCredentials(absl::string_view address,
                                                                                CertRole peer) const {
  if (!tls()) return grpc::InsecureChannelCredentials();
  if (absl::StartsWith(address, "unix:")) {
    std::shared_ptr<grpc::ChannelCredentials> local = grpc::experimental::LocalCredentials(UDS);
    if (!has_token()) return local;
    return grpc::CompositeChannelCredentials(local, grpc::AccessTokenCredentials(token_));
  }
  grpc::experimental::TlsChannelCredentialsOptions tls;
  tls.set_certificate_provider(FileProvider(options_));
  tls.watch_root_certs();
  tls.watch_identity_key_cert_pairs();
  tls.set_verify_server_certs(true);
  if (peer != CertRole::kNone) {
    // Replaces gRPC's host name verifier, so RoleVerifier checks the name too.
    tls.set_certificate_verifier(
        grpc::experimental::ExternalCertificateVerifier::Create<RoleVerifier>(options_.server_name, peer));
    tls.set_check_call_host(false);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::experimental::TlsCredentials(tls);
  if (!has_token()) return credentials;
  return grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(token_));
}

void TransportSecurity::ConfigureChannel(grpc::ChannelArguments* args) const {
  if (tls()) args->SetSslTargetNameOverride(options_.server_name);
}

std::shared_ptr<grpc::Channel> TransportSecurity::NewChannel(const std::string& address, grpc::ChannelArguments args,
                                                             CertRole peer) const {
  ConfigureChannel(&args);
  return grpc::CreateCustomChannel(address, ChannelCredentials(address, peer), args);
}

absl::Status CheckPrivateDir(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("unix socket folder '", dir, "': ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("unix socket folder '", dir, "' is not a folder"));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat("unix socket folder '", dir, "' belongs to uid ", st.st_uid,
                                                      ", not to this process's uid ", geteuid()));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "unix socket folder '%s' has mode %04o: other users could connect to the job's sockets; expected no group or "
        "other permissions (chmod 700)",
        dir, st.st_mode & 07777));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PrivateSocketDir(const std::string& parent, const std::string& name) {
  if (access(parent.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket folder '", parent, "': not a writable folder (", std::strerror(errno), ")"));
  }
  const std::string dir = (std::filesystem::path(parent) / name).string();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(absl::StrCat("cannot make '", dir, "': ", std::strerror(errno)));
  }
  RETURN_IF_ERROR(CheckPrivateDir(dir));
  return dir;
}

}  // namespace pstrain
