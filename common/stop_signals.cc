#include "common/stop_signals.h"

#include <pthread.h>
#include <signal.h>

#include <utility>

#include <glog/logging.h>

namespace pstrain {
namespace {

// SIGUSR1 is ours only to wake the signal thread when it should leave.
sigset_t StopSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

}  // namespace

StopSignals::StopSignals(std::function<void()> stop) {
  sigset_t set = StopSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([set, stop = std::move(stop)] {
    for (;;) {
      int signal = 0;
      if (sigwait(&set, &signal) != 0 || signal == SIGUSR1) return;
      LOG(WARNING) << "signal " << signal << " (" << strsignal(signal) << "): stopping";
      stop();
    }
  });
}

StopSignals::~StopSignals() {
  pthread_kill(thread_.native_handle(), SIGUSR1);
  thread_.join();
}

}  // namespace pstrain
