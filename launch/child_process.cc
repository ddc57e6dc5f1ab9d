#include "launch/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace launch {
namespace {

int Index(Stream stream) { return stream == Stream::kStdout ? 0 : 1; }

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

// Runs in the child between fork and exec: async-signal-safe calls only (no allocation, no
// locks), because other threads of the parent may have held locks at the time of fork.
[[noreturn]] void ExecChild(char* const* argv, char* const* envp, pid_t parent, int devnull, int out_w, int err_w,
                            int exec_error_w) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before prctl took effect.
  if (getppid() != parent) _exit(127);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  if (dup2(devnull, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0) {
    int err = errno;
    (void)!write(exec_error_w, &err, sizeof(err));
    _exit(127);
  }
  execve(argv[0], argv, envp);
  int err = errno;
  (void)!write(exec_error_w, &err, sizeof(err));
  _exit(127);
}

}  // namespace

ExitStatus ExitStatus::FromWaitStatus(int wait_status) {
  ExitStatus status;
  if (WIFSIGNALED(wait_status)) {
    status.signaled = true;
    status.signal = WTERMSIG(wait_status);
  } else {
    status.code = WEXITSTATUS(wait_status);
  }
  return status;
}

std::string ExitStatus::ToString() const {
  if (!signaled) return absl::StrCat("exited with status ", code);
  const char* abbrev = sigabbrev_np(signal);
  return absl::StrCat("was killed by signal ", signal, abbrev != nullptr ? absl::StrCat(" (SIG", abbrev, ")") : "");
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const Options& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("spawn: argv is empty");
  const std::string command = absl::StrJoin(options.argv, " ");

  // Everything the child needs is prepared here, before fork.
  std::vector<char*> argv;
  for (const std::string& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  // The launcher's environment without the variables options.env replaces, then those.
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : options.env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("spawn '", command, "': bad environment variable name '", name, "'"));
    }
    env_strings.push_back(absl::StrCat(name, "=", value));
  }
  std::vector<char*> envp;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const bool replaced = std::any_of(options.env.begin(), options.env.end(), [&](const auto& var) {
      return absl::StartsWith(entry, var.first) && entry.size() > var.first.size() && entry[var.first.size()] == '=';
    });
    if (!replaced) envp.push_back(*e);
  }
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  // All fds are close-on-exec: the child's dup2 copies are the only ones that survive exec, so
  // no child inherits another's pipes (which would keep them open past that child's end).
  int out[2] = {-1, -1}, err[2] = {-1, -1}, exec_error[2] = {-1, -1};
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto close_all = [&] {
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &exec_error[0], &exec_error[1], &devnull}) {
      CloseFd(fd);
    }
  };
  if (devnull < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(exec_error, O_CLOEXEC) != 0) {
    int e = errno;
    close_all();
    return absl::InternalError(absl::StrCat("spawn '", command, "': cannot create pipes: ", strerror(e)));
  }

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close_all();
    return absl::InternalError(absl::StrCat("spawn '", command, "': fork failed: ", strerror(e)));
  }
  if (pid == 0) ExecChild(argv.data(), envp.data(), parent, devnull, out[1], err[1], exec_error[1]);

  CloseFd(&out[1]);
  CloseFd(&err[1]);
  CloseFd(&exec_error[1]);
  CloseFd(&devnull);
  // The error pipe closes without data when exec succeeds, or carries exec's errno.
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(exec_error[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  CloseFd(&exec_error[0]);
  if (n == sizeof(exec_errno)) {
    int wait_status;
    while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    close_all();
    return ErrnoStatus(exec_errno, absl::StrCat("spawn '", command, "': cannot execute ", options.argv[0]));
  }
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, out[0], err[0]));
}

ChildProcess::ChildProcess(pid_t pid, int stdout_fd, int stderr_fd) : pid_(pid), fds_{stdout_fd, stderr_fd} {}

ChildProcess::~ChildProcess() {
  if (!Poll().has_value()) {
    kill(pid_, SIGKILL);
    Wait();
  }
  CloseFd(&fds_[0]);
  CloseFd(&fds_[1]);
}

int ChildProcess::fd(Stream stream) const { return fds_[Index(stream)]; }

void ChildProcess::CloseStream(Stream stream) { CloseFd(&fds_[Index(stream)]); }

absl::StatusOr<bool> ChildProcess::Read(Stream stream, std::string* out) {
  int fd = fds_[Index(stream)];
  if (fd < 0) return false;
  char buffer[16384];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      out->append(buffer, n);
      continue;
    }
    if (n == 0) {
      CloseStream(stream);
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    int e = errno;
    CloseStream(stream);
    return absl::InternalError(
        absl::StrCat("reading ", stream == Stream::kStdout ? "stdout" : "stderr", " of pid ", pid_, ": ", strerror(e)));
  }
}

std::optional<ExitStatus> ChildProcess::Poll() {
  if (exit_status_.has_value()) return exit_status_;
  int wait_status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &wait_status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) exit_status_ = ExitStatus::FromWaitStatus(wait_status);
  return exit_status_;
}

ExitStatus ChildProcess::Wait() {
  if (exit_status_.has_value()) return *exit_status_;
  int wait_status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &wait_status, 0);
  } while (r < 0 && errno == EINTR);
  // waitpid on our own unreaped child fails only if someone else reaped it (SIGCHLD ignored).
  exit_status_ = r == pid_ ? ExitStatus::FromWaitStatus(wait_status) : ExitStatus{true, 0, SIGKILL};
  return *exit_status_;
}

absl::Status ChildProcess::Signal(int signal) {
  if (exit_status_.has_value()) return absl::OkStatus();
  // An ended but unreaped child is a zombie: kill() succeeds on it and does nothing.
  if (kill(pid_, signal) != 0) {
    return absl::InternalError(absl::StrCat("kill(", pid_, ", ", signal, "): ", strerror(errno)));
  }
  return absl::OkStatus();
}

ExitStatus ChildProcess::Stop(absl::Duration grace) {
  if (Poll().has_value()) return *exit_status_;
  (void)Signal(SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    if (Poll().has_value()) return *exit_status_;
    absl::SleepFor(absl::Milliseconds(10));
  }
  (void)Signal(SIGKILL);
  return Wait();
}

}  // namespace launch
}  // namespace pstrain
