// Session credentials and lease grants (common/session_credential.h): every call to the scheduler
// and the servers carries text a caller chose as its credential, every ASYNC/SSP push a grant.
// Verification must refuse whatever does not verify with UNAUTHENTICATED, never crash, and what
// does verify (the seeds, signed with this target's fixed key, and other spellings of the same
// bytes) must name what the key signed.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "common/session_credential.h"
#include "glog/logging.h"

namespace {

// A fixed key, so that the seed corpus (a credential and a grant it signed) verifies.
const pstrain::SessionSigner& Signer() {
  static const pstrain::SessionSigner* signer =
      pstrain::SessionSigner::FromPrivateKey(std::string(32, '\x07')).value().release();
  return *signer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pstrain::SessionVerifier* verifier =
      pstrain::SessionVerifier::Create(Signer().public_key()).value().release();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<pstrain::SessionClaims> claims = verifier->Verify(text);
  if (claims.ok()) {
    CHECK(*verifier->Verify(Signer().Sign(*claims)) == *claims) << "claims that do not survive signing";
  } else {
    CHECK(absl::IsUnauthenticated(claims.status())) << claims.status();
  }
  absl::StatusOr<pstrain::LeaseGrant> lease = verifier->VerifyLease(text);
  if (lease.ok()) {
    CHECK(*verifier->VerifyLease(Signer().SignLease(*lease)) == *lease) << "a grant that does not survive signing";
  } else {
    CHECK(absl::IsUnauthenticated(lease.status())) << lease.status();
  }
  return 0;
}
