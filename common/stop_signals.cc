#include "common/stop_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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

sigset_t StopSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void SetAction(void (*handler)(int)) {
  struct sigaction action = {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace

// A real handler as well as the mask: libraries such as OpenBLAS start threads before main()
// runs, and those threads do not inherit a mask set later, so a process-directed SIGTERM could
// land on one of them and, with no handler, kill the process.
StopSignals::StopSignals() {
  int fds[2];
  CHECK_EQ(pipe2(fds, O_CLOEXEC), 0) << "pipe2: " << strerror(errno);
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  CHECK_EQ(g_signal_pipe_write, -1) << "only one StopSignals per process";
  g_signal_pipe_write = write_fd_;
  const sigset_t stop_set = StopSet();
  CHECK_EQ(pthread_sigmask(SIG_BLOCK, &stop_set, &previous_mask_), 0);
  SetAction(OnSignal);
  thread_ = std::thread([this, stop_set] {
    CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &stop_set, nullptr), 0);
    Watch();
  });
}

void StopSignals::Watch() {
  while (true) {
    struct pollfd ready = {read_fd_, POLLIN, 0};
    if (poll(&ready, 1, -1) < 0) {
      if (errno == EINTR) continue;
      PLOG(ERROR) << "poll on the signal pipe";
      return;
    }
    unsigned char signal = 0;
    const ssize_t n = read(read_fd_, &signal, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || signal == 0) return;  // 0: the destructor's wake-up.
    absl::MutexLock lock(&mu_);
    if (stop_ == nullptr) {
      // No role to stop (not started yet, or lingering after): the default action, taken on this
      // thread, which has the signal unblocked, ends the process as if no handler were installed.
      // The line says why a process ended with no word of its own.
      LOG(WARNING) << "signal " << int{signal} << " (" << strsignal(signal)
                   << ") with no role running: the default action";
      struct sigaction action = {};
      action.sa_handler = SIG_DFL;
      sigemptyset(&action.sa_mask);
      sigaction(signal, &action, nullptr);
      raise(signal);
      continue;
    }
    LOG(WARNING) << "signal " << int{signal} << " (" << strsignal(signal) << "): stopping";
    stop_();
  }
}

StopSignals::~StopSignals() {
  SetAction(SIG_DFL);
  const unsigned char wake = 0;
  [[maybe_unused]] ssize_t n = write(write_fd_, &wake, 1);
  thread_.join();
  g_signal_pipe_write = -1;
  close(read_fd_);
  close(write_fd_);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

StopSignals::Forwarding::Forwarding(StopSignals* signals, std::function<void()> stop) : signals_(signals) {
  absl::MutexLock lock(&signals_->mu_);
  signals_->stop_ = std::move(stop);
}

StopSignals::Forwarding::~Forwarding() {
  absl::MutexLock lock(&signals_->mu_);
  signals_->stop_ = nullptr;
}

}  // namespace pstrain
