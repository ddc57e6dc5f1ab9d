#include "transport/job_credentials.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

struct Freer {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Freer>;

absl::Status OpenSslError(absl::string_view what) {
  std::string detail;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    absl::StrAppend(&detail, detail.empty() ? "" : "; ", text);
  }
  return absl::InternalError(absl::StrCat("making job credentials: ", what, " failed: ", detail));
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Owned<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) return OpenSslError(absl::StrCat("extension ", value));
  return absl::OkStatus();
}

// A certificate for `key`, named `common_name`, signed by `issuer_key` as `issuer` (itself when
// null: a self-signed CA); a role's (`role_uri` its URI SAN) unless `ca`.
absl::StatusOr<Owned<X509>> MakeCertificate(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                                            EVP_PKEY* issuer_key, bool ca, const std::string& role_uri,
                                            const JobCredentialOptions& options) {
  Owned<X509> cert(X509_new());
  if (cert == nullptr) return OpenSslError("X509_new");
  X509_set_version(cert.get(), 2);
  // A random 64-bit serial: two jobs' certificates never share one.
  unsigned char serial_bytes[8];
  if (RAND_bytes(serial_bytes, sizeof(serial_bytes)) != 1) return OpenSslError("RAND_bytes");
  serial_bytes[0] &= 0x7f;
  BIGNUM* serial = BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr);
  BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert.get()));
  BN_free(serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);  // Tolerates clocks an hour apart.
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(options.valid_for));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("pstrain job"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                             -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  if (ca) {
    RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE"));
    RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_key_usage, "critical,digitalSignature,keyEncipherment"));
    RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth"));
    RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_subject_alt_name,
                                 absl::StrCat("DNS:", options.server_name, ",IP:127.0.0.1,IP:::1,URI:", role_uri)));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return OpenSslError("signing the certificate");
  return cert;
}

template <typename WritePem>
absl::StatusOr<std::string> ToPem(WritePem write) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) return OpenSslError("writing PEM");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

// Creates `path` afresh with `mode` (0600 for secrets: nobody else on the machine may read them).
absl::Status WriteNewFile(const std::string& path, const std::string& contents, mode_t mode) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("creating '", path, "'"));
  absl::Status status = WriteAll(fd, contents.data(), contents.size(), path);
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, absl::StrCat("closing '", path, "'"));
  return status;
}

}  // namespace

TransportSecurityOptions JobCredentials::For(CertRole role) const {
  TransportSecurityOptions out;
  const std::string name(CertRoleName(role));
  out.ca_file = dir + "/ca.pem";
  out.cert_file = absl::StrCat(dir, "/", name, ".pem");
  out.key_file = absl::StrCat(dir, "/", name, "-key.pem");
  out.token_file = dir + "/token";
  out.server_name = server_name;
  return out;
}

absl::StatusOr<JobCredentials> MakeJobCredentials(const std::string& dir, const JobCredentialOptions& options) {
  if (options.job.empty() || options.job.size() > 128 ||
      !std::all_of(options.job.begin(), options.job.end(),
                   [](char c) { return absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_'; })) {
    return absl::InvalidArgumentError(absl::StrCat("job credentials: job label '", options.job,
                                                   "': expected 1 to 128 letters, digits, '-', '.' or '_'"));
  }
  Owned<EVP_PKEY> ca_key(EVP_EC_gen("P-256"));
  if (ca_key == nullptr) return OpenSslError("generating a P-256 key");
  ASSIGN_OR_RETURN(Owned<X509> ca, MakeCertificate(ca_key.get(), "pstrain job CA", nullptr, ca_key.get(),
                                                   /*ca=*/true, "", options));
  ASSIGN_OR_RETURN(std::string ca_pem, ToPem([&](BIO* b) { return PEM_write_bio_X509(b, ca.get()); }));
  unsigned char token_bytes[32];
  if (RAND_bytes(token_bytes, sizeof(token_bytes)) != 1) return OpenSslError("RAND_bytes");
  const std::string token =
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(token_bytes), sizeof(token_bytes)));

  JobCredentials out{dir, options.server_name};
  RETURN_IF_ERROR(WriteNewFile(dir + "/ca.pem", ca_pem, 0600));
  RETURN_IF_ERROR(WriteNewFile(dir + "/token", token + "\n", 0600));
  for (CertRole role : kCertRoles) {
    Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
    if (key == nullptr) return OpenSslError("generating a P-256 key");
    ASSIGN_OR_RETURN(Owned<X509> cert,
                     MakeCertificate(key.get(), absl::StrCat(options.server_name, " ", CertRoleName(role)), ca.get(),
                                     ca_key.get(), /*ca=*/false, CertRoleUri(options.job, role), options));
    ASSIGN_OR_RETURN(std::string cert_pem, ToPem([&](BIO* b) { return PEM_write_bio_X509(b, cert.get()); }));
    ASSIGN_OR_RETURN(std::string key_pem, ToPem([&](BIO* b) {
                       return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
                     }));
    const TransportSecurityOptions files = out.For(role);
    RETURN_IF_ERROR(WriteNewFile(files.cert_file, cert_pem, 0600));
    RETURN_IF_ERROR(WriteNewFile(files.key_file, key_pem, 0600));
  }
  return out;
}

}  // namespace pstrain
