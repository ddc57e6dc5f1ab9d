#include "transport/peer_role.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pstrain {
namespace {

constexpr absl::string_view kUriPrefix = "spiffe://pstrain/";

struct Freer {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};

// The role of one URI, kNone when it is not spiffe://pstrain/<job>/<role>.
CertRole RoleOfUri(absl::string_view uri) {
  if (!absl::ConsumePrefix(&uri, kUriPrefix)) return CertRole::kNone;
  const size_t slash = uri.find('/');
  if (slash == 0 || slash == absl::string_view::npos) return CertRole::kNone;
  return CertRoleFromName(uri.substr(slash + 1));
}

// The one role among `uris` (views or strings), kNone for none or several (ambiguous).
template <typename Uris>
CertRole OneRole(const Uris& uris) {
  CertRole found = CertRole::kNone;
  for (const auto& uri : uris) {
    const CertRole role = RoleOfUri(absl::string_view(uri.data(), uri.size()));
    if (role == CertRole::kNone) continue;
    if (found != CertRole::kNone) return CertRole::kNone;
    found = role;
  }
  return found;
}

}  // namespace

absl::string_view CertRoleName(CertRole role) {
  switch (role) {
    case CertRole::kScheduler:
      return "scheduler";
    case CertRole::kServer:
      return "server";
    case CertRole::kWorker:
      return "worker";
    case CertRole::kOperator:
      return "operator";
    case CertRole::kServing:
      return "serving";
    case CertRole::kNone:
      break;
  }
  return "no role";
}

CertRole CertRoleFromName(absl::string_view name) {
  for (CertRole role : kCertRoles) {
    if (name == CertRoleName(role)) return role;
  }
  return CertRole::kNone;
}

std::string CertRoleUri(absl::string_view job, CertRole role) {
  return absl::StrCat(kUriPrefix, job, "/", CertRoleName(role));
}

CertRole CertRoleFromUris(const std::vector<std::string>& uris) { return OneRole(uris); }

absl::StatusOr<CertRole> CertRoleOfPem(absl::string_view pem) {
  std::unique_ptr<BIO, Freer> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, Freer> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) return absl::InvalidArgumentError("no PEM X.509 certificate");
  std::unique_ptr<GENERAL_NAMES, Freer> names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  std::vector<std::string> uris;
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    uris.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                      static_cast<size_t>(ASN1_STRING_length(uri)));
  }
  return CertRoleFromUris(uris);
}

Peer PeerOf(const grpc::AuthContext* context) {
  Peer peer;
  if (context == nullptr) return peer;
  // A TLS peer that presented a certificate has its PEM in the context; a unix socket's (local
  // credentials) and a plaintext one's have none.
  if (context->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME).empty()) return peer;
  peer.has_certificate = true;
  peer.role = OneRole(context->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME));
  return peer;
}

absl::Status CheckPeerRole(const Peer& peer, CertRole needed, absl::string_view what) {
  if (!peer.has_certificate || peer.role == needed) return absl::OkStatus();
  const std::string fix =
      absl::StrCat("a ", CertRoleName(needed), " needs the job's ", CertRoleName(needed), " certificate (--tls_cert)");
  if (peer.role == CertRole::kNone) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": the peer's certificate carries no role (no ", kUriPrefix, "<job>/<role> URI, or several); ", fix,
        ". Certificates shared by every role are no longer accepted: issue one per role (pstrain-launch does; "
        "see the security guide)"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(what, ": the peer's certificate is for role ", CertRoleName(peer.role), "; ", fix));
}

}  // namespace pstrain
