// One child process with its stdout and stderr captured through pipes.
#ifndef PSTRAIN_LAUNCH_CHILD_PROCESS_H_
#define PSTRAIN_LAUNCH_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain {
namespace launch {

// How a child ended.
struct ExitStatus {
  bool signaled = false;  // Killed by a signal rather than exiting.
  int code = 0;           // Exit code, when !signaled.
  int signal = 0;         // Signal number, when signaled.

  static ExitStatus FromWaitStatus(int wait_status);

  bool ok() const { return !signaled && code == 0; }
  // "exited with status 1" or "was killed by signal 9 (SIGKILL)", to follow the child's name.
  std::string ToString() const;
};

// Which of the child's output streams.
enum class Stream { kStdout, kStderr };

// A started child process. The child:
//   - reads /dev/null as stdin; its stdout and stderr go to two pipes the owner drains;
//   - starts with an empty signal mask and default SIGINT/SIGTERM/SIGPIPE handling, whatever
//     the launcher itself blocks or ignores;
//   - stays in the launcher's process group and gets SIGKILL when the thread that spawned it
//     exits (PR_SET_PDEATHSIG), so no child outlives a launcher that dies abruptly. Spawn from
//     a thread that lives as long as the children (the main thread).
//
// The destructor kills (SIGKILL) and reaps a child still running, and closes the pipes.
//
// Not thread-safe: one thread owns the object. Spawn() may be called while other threads run
// (the child does only async-signal-safe work between fork and exec).
class ChildProcess {
 public:
  struct Options {
    // argv[0] is the program's path; it is not looked up in PATH. Must not be empty.
    std::vector<std::string> argv;
    // Variables (name, value) set in the child's environment, which is otherwise the launcher's:
    // each replaces a variable of the same name. Names must not contain '='.
    std::vector<std::pair<std::string, std::string>> env = {};
  };

  // Starts the child. INVALID_ARGUMENT for an empty argv or a bad env name; NOT_FOUND / PERMISSION_DENIED /
  // INTERNAL when the program cannot be executed (the exec error is reported here, not as a
  // child exit status); INTERNAL when pipes or fork fail.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const Options& options);

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }

  // The non-blocking read end of a stream's pipe, for poll(); -1 once the stream reached end
  // of file (the fd is then closed).
  int fd(Stream stream) const;

  // Appends whatever `stream` holds right now to *out without blocking. Returns true while the
  // stream is open and false once it reached end of file (also when it already had). INTERNAL
  // on a read error, after which the stream counts as closed.
  absl::StatusOr<bool> Read(Stream stream, std::string* out);

  // Reaps the child if it has ended, without blocking. Returns its exit status once it ended
  // (and from then on), nothing while it runs.
  std::optional<ExitStatus> Poll();

  // Blocks until the child ends; returns its exit status.
  ExitStatus Wait();

  // Sends `signal` to a child that has not been reaped yet; does nothing after it was (its pid
  // may belong to someone else by then). INTERNAL if kill() fails.
  absl::Status Signal(int signal);

  // Asks the child to stop (SIGTERM), waits up to `grace` for it, then kills it (SIGKILL).
  // Blocks until it ended; returns its exit status. Does not drain the pipes: a child blocked
  // writing to a full pipe is killed after `grace`.
  ExitStatus Stop(absl::Duration grace);

 private:
  ChildProcess(pid_t pid, int stdout_fd, int stderr_fd);
  void CloseStream(Stream stream);

  const pid_t pid_;
  int fds_[2];  // Indexed by Stream; -1 once closed.
  std::optional<ExitStatus> exit_status_;
};

}  // namespace launch
}  // namespace pstrain

#endif  // PSTRAIN_LAUNCH_CHILD_PROCESS_H_
