// Turns SIGINT and SIGTERM into a call of a stop function, safely.
//
// The signals are blocked in the calling thread before any other thread starts (gRPC's threads
// inherit the mask), and one thread of this object takes them with sigwait, so the stop function
// runs on an ordinary thread and may lock, log and call into gRPC. Create it in main() before any
// other thread; destroy it after the work it guards has returned.
#ifndef PSTRAIN_COMMON_STOP_SIGNALS_H_
#define PSTRAIN_COMMON_STOP_SIGNALS_H_

#include <functional>
#include <thread>

namespace pstrain {

class StopSignals {
 public:
  // `stop` is called (on the signal thread) for every SIGINT or SIGTERM; it must be thread-safe
  // and may be called more than once.
  explicit StopSignals(std::function<void()> stop);
  ~StopSignals();

  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_STOP_SIGNALS_H_
