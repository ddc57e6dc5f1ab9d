#include "common/session_credential.h"

#include <openssl/evp.h>

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr size_t kKeyBytes = 32;
constexpr size_t kSignatureBytes = 64;
constexpr char kSessionVersion[] = "pstrain-session-v1";
constexpr char kLeaseVersion[] = "pstrain-lease-v2";
// Enough for every rank of a large job and its replacements; past it the cache starts over
// rather than grow with a stream of distinct (valid) credentials.
constexpr size_t kMaxRemembered = 4096;
// A credential is short; anything much longer is refused before it is decoded.
constexpr size_t kMaxCredentialBytes = 2048;

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

std::string Payload(const SessionClaims& claims) {
  return absl::StrCat(kSessionVersion, "\n", static_cast<int>(claims.role), "\n", claims.rank, "\n",
                      claims.instance_id);
}

std::string Payload(const LeaseGrant& lease) {
  return absl::StrJoin({std::string(kLeaseVersion), absl::StrCat(lease.worker_rank), absl::StrCat(lease.epoch),
                        absl::StrCat(lease.lease_id), absl::StrCat(lease.begin), absl::StrCat(lease.end),
                        absl::StrCat(lease.first_batch), absl::StrCat(lease.granted_unix_ms)},
                       "\n");
}

std::string RawKey(EVP_PKEY* key, bool private_part) {
  std::string raw(kKeyBytes, '\0');
  size_t len = raw.size();
  const int ok = private_part ? EVP_PKEY_get_raw_private_key(key, reinterpret_cast<unsigned char*>(raw.data()), &len)
                              : EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(raw.data()), &len);
  CHECK(ok == 1 && len == kKeyBytes) << "an Ed25519 key without its raw bytes";
  return raw;
}

// An Ed25519 key from its 32 raw bytes. INVALID_ARGUMENT naming which key for any other input.
absl::StatusOr<Pkey> KeyFromRaw(absl::string_view raw, bool private_key) {
  const char* what = private_key ? "session signing key" : "session public key";
  if (raw.size() != kKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": got ", raw.size(), " bytes, expected ", kKeyBytes));
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(raw.data());
  Pkey pkey(private_key ? EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, bytes, raw.size())
                        : EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, bytes, raw.size()));
  if (pkey == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": not an Ed25519 key"));
  return pkey;
}

}  // namespace

struct SessionSigner::Key {
  Pkey pkey;
};
struct SessionVerifier::Key {
  Pkey pkey;
};

std::string DescribeCaller(const SessionClaims& claims) {
  const char* role = claims.role == SERVER ? "server" : claims.role == WORKER ? "worker" : "role";
  return absl::StrCat(role, " ", claims.rank);
}

SessionSigner::SessionSigner(std::unique_ptr<Key> key, std::string private_key, std::string public_key)
    : key_(std::move(key)), private_key_(std::move(private_key)), public_key_(std::move(public_key)) {}
SessionSigner::~SessionSigner() = default;

absl::StatusOr<std::unique_ptr<SessionSigner>> SessionSigner::Generate() {
  EVP_PKEY* raw = nullptr;
  std::unique_ptr<EVP_PKEY_CTX, void (*)(EVP_PKEY_CTX*)> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr),
                                                             EVP_PKEY_CTX_free);
  if (ctx == nullptr || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1) {
    return absl::InternalError("session credentials: cannot generate an Ed25519 key");
  }
  Pkey pkey(raw);
  std::string private_key = RawKey(pkey.get(), true);
  std::string public_key = RawKey(pkey.get(), false);
  return std::unique_ptr<SessionSigner>(
      new SessionSigner(std::make_unique<Key>(Key{std::move(pkey)}), std::move(private_key), std::move(public_key)));
}

absl::StatusOr<std::unique_ptr<SessionSigner>> SessionSigner::FromPrivateKey(absl::string_view raw) {
  absl::StatusOr<Pkey> pkey = KeyFromRaw(raw, /*private_key=*/true);
  if (!pkey.ok()) return pkey.status();
  std::string public_key = RawKey(pkey->get(), false);
  return std::unique_ptr<SessionSigner>(
      new SessionSigner(std::make_unique<Key>(Key{*std::move(pkey)}), std::string(raw), std::move(public_key)));
}

std::string SessionSigner::Sign(const SessionClaims& claims) const { return SignPayload(Payload(claims)); }

std::string SessionSigner::SignLease(const LeaseGrant& lease) const { return SignPayload(Payload(lease)); }

std::string SessionSigner::SignPayload(const std::string& payload) const {
  unsigned char signature[kSignatureBytes];
  size_t len = sizeof(signature);
  MdCtx ctx(EVP_MD_CTX_new());
  // Ed25519 signs the message itself (no digest), and cannot fail with a valid key and buffer.
  CHECK(ctx != nullptr && EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) == 1 &&
        EVP_DigestSign(ctx.get(), signature, &len, reinterpret_cast<const unsigned char*>(payload.data()),
                       payload.size()) == 1 &&
        len == kSignatureBytes)
      << "Ed25519 signing failed";
  return absl::StrCat(absl::WebSafeBase64Escape(payload), ".",
                      absl::WebSafeBase64Escape(absl::string_view(reinterpret_cast<char*>(signature), len)));
}

SessionVerifier::SessionVerifier(std::unique_ptr<Key> key) : key_(std::move(key)) {}
SessionVerifier::~SessionVerifier() = default;

absl::StatusOr<std::unique_ptr<SessionVerifier>> SessionVerifier::Create(absl::string_view public_key) {
  absl::StatusOr<Pkey> pkey = KeyFromRaw(public_key, /*private_key=*/false);
  if (!pkey.ok()) return pkey.status();
  return std::unique_ptr<SessionVerifier>(new SessionVerifier(std::make_unique<Key>(Key{*std::move(pkey)})));
}

absl::StatusOr<std::string> SessionVerifier::VerifiedPayload(absl::string_view text, absl::string_view what) const {
  const auto malformed = [what](absl::string_view why) {
    return absl::UnauthenticatedError(absl::StrCat("malformed ", what, ": ", why));
  };
  if (text.size() > kMaxCredentialBytes) {
    return malformed(absl::StrCat(text.size(), " bytes, at most ", kMaxCredentialBytes, " expected"));
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  std::string payload, signature;
  if (parts.size() != 2 || !absl::WebSafeBase64Unescape(parts[0], &payload) ||
      !absl::WebSafeBase64Unescape(parts[1], &signature)) {
    return malformed("expected two web-safe base64 parts joined by '.'");
  }
  if (signature.size() != kSignatureBytes) {
    return malformed(absl::StrCat("a ", signature.size(), "-byte signature, expected ", kSignatureBytes));
  }
  MdCtx ctx(EVP_MD_CTX_new());
  if (ctx == nullptr || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) != 1) {
    return absl::InternalError("session credentials: cannot set up Ed25519 verification");
  }
  if (EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                       reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) != 1) {
    return absl::UnauthenticatedError(
        absl::StrCat(what, ": the signature does not verify (not issued by this job's scheduler, or altered)"));
  }
  return payload;
}

template <typename T>
void SessionVerifier::Remember(absl::string_view text, const T& value,
                               absl::flat_hash_map<std::string, T>* cache) const {
  if (cache->size() >= kMaxRemembered) cache->clear();
  cache->emplace(std::string(text), value);
}

absl::StatusOr<SessionClaims> SessionVerifier::Verify(absl::string_view credential) const {
  if (credential.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("no session credential: register first and send the credential "
                     "Register answered as '",
                     kSessionMetadataKey, "' metadata"));
  }
  {
    absl::MutexLock lock(&mu_);
    // Heterogeneous lookup: a worker's every call after its first costs no copy of its credential.
    if (auto it = sessions_.find(credential); it != sessions_.end()) return it->second;
  }
  absl::StatusOr<std::string> payload = VerifiedPayload(credential, "session credential");
  if (!payload.ok()) return payload.status();
  // Signed by the scheduler, so the payload is one it wrote; still parsed with care (a lease
  // grant passed off as a credential is refused here).
  const std::vector<std::string> fields = absl::StrSplit(*payload, absl::MaxSplits('\n', 3));
  SessionClaims claims;
  int role = 0;
  if (fields.size() != 4 || fields[0] != kSessionVersion || !absl::SimpleAtoi(fields[1], &role) ||
      !absl::SimpleAtoi(fields[2], &claims.rank) || (role != SERVER && role != WORKER)) {
    return absl::UnauthenticatedError(
        absl::StrCat("malformed session credential: a payload that is not ", kSessionVersion));
  }
  claims.role = static_cast<Role>(role);
  claims.instance_id = fields[3];
  absl::MutexLock lock(&mu_);
  Remember(credential, claims, &sessions_);
  return claims;
}

absl::StatusOr<LeaseGrant> SessionVerifier::VerifyLease(absl::string_view grant) const {
  if (grant.empty()) {
    return absl::UnauthenticatedError(
        "no lease grant: a push of an ASYNC/SSP batch carries the grant LeaseWork answered with its lease");
  }
  {
    absl::MutexLock lock(&mu_);
    if (auto it = leases_.find(grant); it != leases_.end()) return it->second;
  }
  absl::StatusOr<std::string> payload = VerifiedPayload(grant, "lease grant");
  if (!payload.ok()) return payload.status();
  const std::vector<absl::string_view> fields = absl::StrSplit(*payload, '\n');
  LeaseGrant lease;
  if (fields.size() != 8 || fields[0] != kLeaseVersion || !absl::SimpleAtoi(fields[1], &lease.worker_rank) ||
      !absl::SimpleAtoi(fields[2], &lease.epoch) || !absl::SimpleAtoi(fields[3], &lease.lease_id) ||
      !absl::SimpleAtoi(fields[4], &lease.begin) || !absl::SimpleAtoi(fields[5], &lease.end) ||
      !absl::SimpleAtoi(fields[6], &lease.first_batch) || !absl::SimpleAtoi(fields[7], &lease.granted_unix_ms)) {
    return absl::UnauthenticatedError(absl::StrCat("malformed lease grant: a payload that is not ", kLeaseVersion));
  }
  absl::MutexLock lock(&mu_);
  Remember(grant, lease, &leases_);
  return lease;
}

absl::Status CheckActsAs(const SessionClaims& claims, Role role, int rank, absl::string_view method) {
  if (claims.role == role && claims.rank == rank) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(method, ": ", DescribeCaller(claims), "'s session may not act as ",
                                                  DescribeCaller(SessionClaims{role, rank, ""})));
}

}  // namespace pstrain
