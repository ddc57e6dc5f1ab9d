// Turns SIGINT and SIGTERM into a call of a stop function, safely.
//
// A minimal handler forwards each signal through a pipe to this object's thread, so the stop
// function runs on an ordinary thread and may lock, log and call into gRPC. One per process:
// create it first in main(), before any thread starts, and forward to the role's stop while the
// role runs:
//
//     pstrain::StopSignals signals;  // right after InitBinary
//     ...
//     {
//       pstrain::StopSignals::Forwarding forwarding(&signals, [r] { r->Stop(); });
//       status = r->Run();
//     }
//
// Outside a Forwarding a signal ends the process as its default action would (before the role
// runs, and while it lingers after), as if no handler were installed.
//
// The constructor blocks both signals in the thread that makes it, and so in every thread that
// thread starts later, which inherit its mask; only this object's thread takes them (and threads
// a library started before main(), such as OpenBLAS's, which no mask set here reaches: the
// handler makes a signal that lands there safe). The signal thread waits in poll(), so the
// handler runs as soon as the signal arrives, also under ThreadSanitizer, which runs a handler
// only while its thread is in a call it knows to block (poll is one, read and a futex are not) or
// at the thread's next intercepted call: a signal that landed on a thread asleep on a lock waited
// for that thread to wake, which took from seconds to never.
#ifndef PSTRAIN_COMMON_STOP_SIGNALS_H_
#define PSTRAIN_COMMON_STOP_SIGNALS_H_

#include <signal.h>

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

class StopSignals {
 public:
  StopSignals();
  // Puts the default actions back, then unblocks both signals in the calling thread, which must be
  // the one that made this object (a signal that arrived in between then takes its default action).
  ~StopSignals();

  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // While it lives, every SIGINT or SIGTERM calls `stop` on the signal thread, with the forwarding
  // held, so once the Forwarding is gone no call of `stop` is running or will start. `stop` must
  // be thread-safe, may be called more than once, and must not wait for the Forwarding to end.
  class Forwarding {
   public:
    Forwarding(StopSignals* signals, std::function<void()> stop);
    ~Forwarding();

    Forwarding(const Forwarding&) = delete;
    Forwarding& operator=(const Forwarding&) = delete;

   private:
    StopSignals* const signals_;
  };

 private:
  // The signal thread: waits for the handler's bytes and acts on each.
  void Watch();

  int read_fd_ = -1;
  int write_fd_ = -1;
  sigset_t previous_mask_;
  absl::Mutex mu_;
  std::function<void()> stop_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_STOP_SIGNALS_H_
