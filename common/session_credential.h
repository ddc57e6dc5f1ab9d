// Session credentials: what binds a caller to the role and rank it registered as.
//
// The job's certificate and token (transport/transport_security.h) say "a member of this job"; they
// are the same for every role. A session credential says "server 1" or "worker 3, process X":
// the scheduler issues one at Register (RegisterResponse.session_credential), signed with its own
// Ed25519 key, and the role sends it as call metadata `pstrain-session` with every later call.
// The scheduler checks it against the rank the request names and the process registered at that
// rank; a parameter server checks it with the scheduler's public key (ClusterView
// .session_public_key) against the worker rank of a push or pull. A holder of the job's
// credentials can then act only as the rank it registered, and the servers never hold a key that
// could mint credentials.
//
//   scheduler                              worker                      server
//   SessionSigner (private key, kept       Register -> credential      SessionVerifier (public
//   in its state file)  --Sign(claims)-->  sends it on every call  --> key from the view) ->
//                                                                      claims: role, rank
//
// The credential is text, "<payload>.<signature>", both web-safe base64 without padding; the
// payload is "pstrain-session-v1", the role, the rank and the instance id, one per line. It
// carries no expiry: it is good for the job's life, and a rank that is removed is refused by the
// membership checks that already exist (a worker rank is never reused; a server's rank may be,
// which is why the claims name the registering process and the scheduler compares it).
//
// Lease grants. The same key signs each ASYNC/SSP training lease the scheduler hands out
// (LeaseResponse.grant, payload "pstrain-lease-v1"): the worker, the data epoch, the lease id,
// its range and its first batch. A worker's pushes carry the grant of their lease, so a server
// can tell, without asking the scheduler, that a (data_epoch, lease_id, lease_batch) was handed
// to that worker and how many samples its batch holds.
#ifndef PSTRAIN_COMMON_SESSION_CREDENTIAL_H_
#define PSTRAIN_COMMON_SESSION_CREDENTIAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/cluster.pb.h"

namespace pstrain {

// The metadata key a session credential travels under (lower case, as gRPC requires).
inline constexpr char kSessionMetadataKey[] = "pstrain-session";

// Who a credential was issued to.
struct SessionClaims {
  Role role = ROLE_UNSPECIFIED;
  int rank = -1;
  // RegisterRequest.instance_id of the registering process (may be empty).
  std::string instance_id;

  bool operator==(const SessionClaims& o) const {
    return role == o.role && rank == o.rank && instance_id == o.instance_id;
  }
};

// "worker 3", "server 0".
std::string DescribeCaller(const SessionClaims& claims);

// An ASYNC/SSP training lease as the scheduler handed it out: positions [begin, end) of data epoch
// `epoch`'s permutation, to worker `worker_rank`, to be trained from batch `first_batch` on (a
// remainder of a dead worker's lease starts past 0).
struct LeaseGrant {
  int worker_rank = -1;
  int epoch = 0;
  int64_t lease_id = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t first_batch = 0;
  // When the scheduler handed it out (milliseconds since the Unix epoch): the servers' clock for
  // eviction's ttl_seconds (LeaseResponse.granted_unix_ms).
  int64_t granted_unix_ms = 0;

  bool operator==(const LeaseGrant& o) const {
    return worker_rank == o.worker_rank && epoch == o.epoch && lease_id == o.lease_id && begin == o.begin &&
           end == o.end && first_batch == o.first_batch && granted_unix_ms == o.granted_unix_ms;
  }
};

// The scheduler's signing key. Thread-safe (signing is stateless).
class SessionSigner {
 public:
  // A fresh random key.
  static absl::StatusOr<std::unique_ptr<SessionSigner>> Generate();
  // The key from its 32 raw private bytes (private_key() of an earlier signer): a restarted
  // scheduler keeps honouring the credentials it issued. INVALID_ARGUMENT for another length.
  static absl::StatusOr<std::unique_ptr<SessionSigner>> FromPrivateKey(absl::string_view raw);
  ~SessionSigner();

  SessionSigner(const SessionSigner&) = delete;
  SessionSigner& operator=(const SessionSigner&) = delete;

  // 32 raw bytes each. The private key must be kept like any secret (the scheduler's state file).
  const std::string& private_key() const { return private_key_; }
  const std::string& public_key() const { return public_key_; }

  // The credential for `claims`. Deterministic (Ed25519): the same claims give the same text.
  std::string Sign(const SessionClaims& claims) const;
  // The grant of `lease`, deterministic too.
  std::string SignLease(const LeaseGrant& lease) const;

 private:
  std::string SignPayload(const std::string& payload) const;

  struct Key;
  SessionSigner(std::unique_ptr<Key> key, std::string private_key, std::string public_key);

  const std::unique_ptr<Key> key_;
  const std::string private_key_;
  const std::string public_key_;
};

// Checks credentials against the scheduler's public key. Thread-safe. Remembers what it has
// verified, parsed (up to a bound), so a worker's calls after its first cost a hash lookup, not a
// signature check and a parse.
class SessionVerifier {
 public:
  // INVALID_ARGUMENT unless `public_key` is 32 raw bytes.
  static absl::StatusOr<std::unique_ptr<SessionVerifier>> Create(absl::string_view public_key);
  ~SessionVerifier();

  SessionVerifier(const SessionVerifier&) = delete;
  SessionVerifier& operator=(const SessionVerifier&) = delete;

  // The claims of `credential`. UNAUTHENTICATED, saying what is wrong, for an empty credential
  // (never registered), text that is no credential, or a signature that does not verify (forged,
  // altered, or from another job's scheduler).
  absl::StatusOr<SessionClaims> Verify(absl::string_view credential) const;
  // The lease a grant names. UNAUTHENTICATED for an empty grant ("a push of an ASYNC/SSP batch
  // carries its lease's grant"), text that is no grant, or a signature that does not verify.
  absl::StatusOr<LeaseGrant> VerifyLease(absl::string_view grant) const;

 private:
  struct Key;
  explicit SessionVerifier(std::unique_ptr<Key> key);

  // The payload `text` carries when its signature verifies; `what` ("session credential", "lease
  // grant") names it in errors.
  absl::StatusOr<std::string> VerifiedPayload(absl::string_view text, absl::string_view what) const;
  // Remembers a verified `text` as `value` in `cache`, starting the cache over when it is full
  // (a stream of distinct valid texts must not grow it).
  template <typename T>
  void Remember(absl::string_view text, const T& value, absl::flat_hash_map<std::string, T>* cache) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<Key> key_;
  mutable absl::Mutex mu_;
  // Texts verified before -> what they say.
  mutable absl::flat_hash_map<std::string, SessionClaims> sessions_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_map<std::string, LeaseGrant> leases_ ABSL_GUARDED_BY(mu_);
};

// The check every role-bound call makes: `claims` (a verified credential) must be `role` `rank`.
// PERMISSION_DENIED otherwise, naming the method, who called and who the request claims to be:
// "Leave: worker 1's session may not act as worker 0".
absl::Status CheckActsAs(const SessionClaims& claims, Role role, int rank, absl::string_view method);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SESSION_CREDENTIAL_H_
