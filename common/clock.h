// Time as the role logic sees it: what time it is, and waiting. The real clock reads the system
// clock and sleeps; tests give the logic a simulated clock whose sleeps advance time at once, so
// recovery paths with multi-second timeouts run in microseconds and deterministically.
//
// Thread safety: every method may be called from any thread.
#ifndef PSTRAIN_COMMON_CLOCK_H_
#define PSTRAIN_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  // Returns after `d` has passed on this clock (at once for d <= 0).
  virtual void SleepFor(absl::Duration d) = 0;

  // The process's real clock; never destroyed.
  static Clock* Real();
};

// A clock that moves only when told to, or when someone sleeps on it: SleepFor(d) advances it by
// d and returns at once. Starts at the Unix epoch plus one day, so that "long ago" stays
// representable.
class SimulatedClock : public Clock {
 public:
  absl::Time Now() override;
  void SleepFor(absl::Duration d) override;
  void Advance(absl::Duration d);

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch() + absl::Hours(24);
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CLOCK_H_
