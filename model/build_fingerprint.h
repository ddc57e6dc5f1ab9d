// What this build computes for where a value lives and what it starts as, as one number, so that
// the scheduler can refuse a role of another build (issue 27, "Bad input"): a server or worker
// whose code cuts keys or initial values differently would train another model with the rest of
// the job, silently. Each role sends its fingerprint when it registers; the scheduler compares it
// with its own (scheduler/scheduler.h, Register).
//
// The fingerprint is a 64-bit FNV-1a hash of probes, computed once per process:
//   - the owner ServerOfKey(key, n) (common/key_hash.h) of 64 fixed keys for n = 1..16;
//   - the initial values (model/init.h) of a 64-element tensor of each init kind.
// Any change to the jump hash, the key mix or the initializers changes it; what the probes do not
// reach (an embedding row's initial values, the checkpoint formats, which carry their own versions)
// does not.
//
// Thread safety: safe from any thread.
#ifndef PSTRAIN_MODEL_BUILD_FINGERPRINT_H_
#define PSTRAIN_MODEL_BUILD_FINGERPRINT_H_

#include <cstdint>

namespace pstrain::model {

// Never 0 (0 means "not sent" in RegisterRequest.build_fingerprint).
uint64_t BuildFingerprint();

}  // namespace pstrain::model

#endif  // PSTRAIN_MODEL_BUILD_FINGERPRINT_H_
