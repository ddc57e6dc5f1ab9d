#include "common/clock.h"

namespace pstrain {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override {
    if (d > absl::ZeroDuration()) absl::SleepFor(d);
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();  // never destroyed: used until exit
  return clock;
}

absl::Time SimulatedClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void SimulatedClock::SleepFor(absl::Duration d) { Advance(d); }

void SimulatedClock::Advance(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  now_ += d;
}

}  // namespace pstrain
