// Turns SIGINT and SIGTERM into a call of a stop function, safely.
//
// A minimal handler forwards each signal through a pipe to this object's thread, so the stop
// function runs on an ordinary thread and may lock, log and call into gRPC. One per process: create
// it in main(); destroy it after the work it guards has returned (the default actions come back).
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
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_STOP_SIGNALS_H_
