#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status ErrnoStatus(int err, absl::string_view what) {
  return absl::ErrnoToStatus(err, what);
}

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("writing '", path, "'"));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view what,
                                 const std::function<absl::Status(int fd)>& write, mode_t mode) {
  // mkstemp: two writers of the same path never share a temporary file.
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("creating a temporary file for ", what, " '", path, "'"));
  absl::Status status = write(fd);
  if (status.ok() && ::fchmod(fd, mode) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("chmod of ", what, " '", temp, "'"));
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("fsync of ", what, " '", temp, "'"));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = ErrnoStatus(errno, absl::StrCat("closing ", what, " '", temp, "'"));
  }
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("renaming '", temp, "' to ", what, " '", path, "'"));
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  // Make the rename durable too: a file that vanishes after a crash was never written.
  const std::string dir = DirectoryOf(path);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoStatus(errno, absl::StrCat("opening folder '", dir, "' to fsync"));
  status = ::fsync(dir_fd) == 0 ? absl::OkStatus()
                                : ErrnoStatus(errno, absl::StrCat("fsync of folder '", dir, "'"));
  ::close(dir_fd);
  return status;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view what,
                                 absl::string_view contents, mode_t mode) {
  return WriteFileAtomically(
      path, what, [&](int fd) { return WriteAll(fd, contents.data(), contents.size(), path); }, mode);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", what, " '", path, "'"));
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat("reading ", what, " '", path, "'"));
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

}  // namespace pstrain
