#include "common/stop_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include <glog/logging.h>

namespace pstrain {
namespace {

// The write end of the pipe the handler signals through. A handler can only use async-signal-safe
// calls, so it writes the signal number and does nothing else. One StopSignals per process.
int g_signal_pipe_write = -1;

void OnSignal(int signal) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal);
  // Nothing to do on failure: a full pipe already holds a pending stop.
  [[maybe_unused]] ssize_t n = write(g_signal_pipe_write, &byte, 1);
  errno = saved;
}

}  // namespace

// A real handler, not sigwait on a blocked mask: libraries such as OpenBLAS start threads before
// main() runs, and those threads would not inherit a mask set later, so a process-directed SIGTERM
// could land on one of them and kill the process.
StopSignals::StopSignals(std::function<void()> stop) {
  int fds[2];
  CHECK_EQ(pipe2(fds, O_CLOEXEC), 0) << "pipe2: " << strerror(errno);
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  CHECK_EQ(g_signal_pipe_write, -1) << "only one StopSignals per process";
  g_signal_pipe_write = write_fd_;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  thread_ = std::thread([this, stop = std::move(stop)] {
    unsigned char signal = 0;
    while (true) {
      ssize_t n = read(read_fd_, &signal, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || signal == 0) return;  // 0: the destructor's wake-up.
      LOG(WARNING) << "signal " << int{signal} << " (" << strsignal(signal) << "): stopping";
      stop();
    }
  });
}

StopSignals::~StopSignals() {
  struct sigaction action = {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const unsigned char wake = 0;
  [[maybe_unused]] ssize_t n = write(write_fd_, &wake, 1);
  thread_.join();
  g_signal_pipe_write = -1;
  close(read_fd_);
  close(write_fd_);
}

}  // namespace pstrain
