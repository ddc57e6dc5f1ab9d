// The launcher's terminal output: whole lines from children and from the launcher, and on a
// terminal one progress line that stays below them.
#ifndef PSTRAIN_LAUNCH_CONSOLE_H_
#define PSTRAIN_LAUNCH_CONSOLE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "launch/child_process.h"

namespace pstrain {
namespace launch {

// With `live_progress` (stdout is a terminal) the progress line is drawn without a newline and
// rewritten in place ("\r\033[K"); before any other line is printed it is erased, and redrawn
// after. Without it, SetProgress() does nothing: the caller prints progress as ordinary lines.
//
// Write errors (a closed pipe) are ignored: losing output must not stop the cluster.
// Borrows the fds; not thread-safe.
class Console {
 public:
  Console(int out_fd, int err_fd, bool live_progress);

  // Writes `line` and a newline to stdout or stderr.
  void Print(Stream stream, absl::string_view line);

  // Replaces the progress line (live mode only).
  void SetProgress(absl::string_view line);

  // Erases the progress line for good (live mode only); call before the final output.
  void ClearProgress();

  bool live_progress() const { return live_progress_; }

 private:
  void Write(int fd, absl::string_view bytes);
  void Erase();

  const int out_fd_;
  const int err_fd_;
  const bool live_progress_;
  std::string progress_;  // What is drawn now; empty when nothing is.
};

}  // namespace launch
}  // namespace pstrain

#endif  // PSTRAIN_LAUNCH_CONSOLE_H_
