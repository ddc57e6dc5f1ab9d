// Real child processes for integration tests: start a binary, read what it prints, wait for it
// with a deadline, kill it for real.
#ifndef PSTRAIN_TESTS_PROCESS_H_
#define PSTRAIN_TESTS_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain::testing {

// Directory of the pstrain binaries: $PSTRAIN_BIN_DIR (ctest sets it), else the bin/ beside the
// test's own folder in the build tree.
std::string BinDir();

// A child whose stdout and stderr go to a file, so the test can read them at any time.
class Child {
 public:
  // Starts `argv` (argv[0] is a path). The child dies with the test process.
  static absl::StatusOr<Child> Start(const std::vector<std::string>& argv, const std::string& log_path);

  pid_t pid() const { return pid_; }

  // Waits up to `timeout` (times kSlowdown) for the child to exit. Returns its exit status
  // (0-255), 128 + signal if a signal killed it, or DEADLINE_EXCEEDED if it is still running.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  // Sends `signal` (e.g. SIGKILL).
  void Kill(int signal);

  // Everything the child printed so far.
  std::string Output() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  bool exited_ = false;
  int status_ = 0;
};

struct RunResult {
  int exit_code = -1;
  std::string output;
};

// Runs `argv` to completion (killing it past `timeout` times kSlowdown, which is then an error).
absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv, absl::Duration timeout);

// A fresh directory under the test's temp dir.
std::string MakeTempDir(const std::string& name);

// Reads the number that follows "\"key\": " in a JSON text; NaN if absent.
double JsonNumber(const std::string& json, const std::string& key);
// Every number that follows "key": in `json`, in order (a run summary lists its epochs first, so
// JsonNumbers(summary, "samples")[e] is epoch e's sample count).
std::vector<double> JsonNumbers(const std::string& json, const std::string& key);

std::string ReadFile(const std::string& path);

// The pids of `parent`'s children whose command line contains `name` (e.g. "pstrain-server").
std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& name);

// Whether the roles' resident memory is glibc's allocator's to bound: not in a sanitizer build
// (PSTRAIN_SANITIZE), whose allocator keeps freed blocks in a quarantine (256 MiB under
// AddressSanitizer) and returns memory on its own schedule. The tests' bounds on resident memory
// hold only where this is true; what else they check holds in both.
#ifdef PSTRAIN_SANITIZED
inline constexpr bool kResidentMemoryIsGlibcs = false;
#else
inline constexpr bool kResidentMemoryIsGlibcs = true;
#endif

// How many times slower the roles run than in the Release build: 5 under ThreadSanitizer, 1
// otherwise (PSTRAIN_TEST_SLOWDOWN, tests/CMakeLists.txt). Child::Wait and Run multiply their
// timeouts by it, and ManualCluster its scheduler's failure-detection limits, so that a test keeps
// the same proportions between "dead after" and "waited for" in every build.
#ifndef PSTRAIN_TEST_SLOWDOWN
#define PSTRAIN_TEST_SLOWDOWN 1
#endif
inline constexpr int kSlowdown = PSTRAIN_TEST_SLOWDOWN;

// `d` times kSlowdown: a test's pause whose length is measured against the roles' own limits
// ("past --dead_after_ms", "within it").
inline absl::Duration Scaled(absl::Duration d) { return d * kSlowdown; }

// "--NAME=MS*kSlowdown": a role's time limit (--dead_after_ms, --hold_up_after_ms) that a test
// sets and then measures its pauses against with Scaled().
std::string MillisFlag(const std::string& name, int64_t ms);

// Process `pid`'s resident memory in KiB (`field` "VmRSS:" of /proc/<pid>/status, or "VmHWM:" for
// its peak); -1 if it cannot be read.
int64_t ResidentKib(pid_t pid, const std::string& field = "VmRSS:");

// A loopback TCP port nobody listens on now (the kernel's pick for a socket closed at once).
int FreeLoopbackPort();

}  // namespace pstrain::testing

#endif  // PSTRAIN_TESTS_PROCESS_H_
