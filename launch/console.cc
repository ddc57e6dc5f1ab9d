#include "launch/console.h"

#include <errno.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace launch {
namespace {
constexpr absl::string_view kEraseLine = "\r\033[K";
}  // namespace

Console::Console(int out_fd, int err_fd, bool live_progress)
    : out_fd_(out_fd), err_fd_(err_fd), live_progress_(live_progress) {}

void Console::Write(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    bytes.remove_prefix(n);
  }
}

void Console::Erase() {
  if (!progress_.empty()) Write(out_fd_, kEraseLine);
}

void Console::Print(Stream stream, absl::string_view line) {
  Erase();
  Write(stream == Stream::kStdout ? out_fd_ : err_fd_, absl::StrCat(line, "\n"));
  if (!progress_.empty()) Write(out_fd_, progress_);
}

void Console::SetProgress(absl::string_view line) {
  if (!live_progress_ || line == progress_) return;
  Write(out_fd_, absl::StrCat(kEraseLine, line));
  progress_ = std::string(line);
}

void Console::ClearProgress() {
  Erase();
  progress_.clear();
}

}  // namespace launch
}  // namespace pstrain
