// Scheduler: session credentials (common/session_credential.h), issued at Register and checked
// here for every call that acts as a rank.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {

void Scheduler::UseSessionKey(std::unique_ptr<SessionSigner> signer) {
  // A key of 32 bytes always makes a verifier.
  verifier_ = *SessionVerifier::Create(signer->public_key());
  signer_ = std::move(signer);
}

absl::StatusOr<SessionClaims> Scheduler::Authenticate(absl::string_view credential) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<SessionClaims> claims = verifier_->Verify(credential);
  if (!claims.ok()) return claims.status();
  // Signed by us, so the rank was handed out; but a server's rank is handed out again when its
  // server is replaced, and the old process's credential must not pass for the new one.
  if (membership_.forgotten(claims->role, claims->rank)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the session of an earlier ", DescribeCaller(*claims), ": it left or died long ago"));
  }
  std::optional<std::string> instance = membership_.InstanceOf(claims->role, claims->rank);
  if (!instance.has_value() || *instance != claims->instance_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("the session of an earlier ", DescribeCaller(*claims), ": another process holds that rank now"));
  }
  return claims;
}

}  // namespace scheduler
}  // namespace pstrain
