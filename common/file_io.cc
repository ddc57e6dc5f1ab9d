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

absl::Status ErrnoStatus(int err, absl::string_view what) { return absl::ErrnoToStatus(err, what); }

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
  status = ::fsync(dir_fd) == 0 ? absl::OkStatus() : ErrnoStatus(errno, absl::StrCat("fsync of folder '", dir, "'"));
  ::close(dir_fd);
  return status;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view what, absl::string_view contents,
                                 mode_t mode) {
  return WriteFileAtomically(
      path, what, [&](int fd) { return WriteAll(fd, contents.data(), contents.size(), path); }, mode);
}

namespace {

// What a file that is not the expected kind is, for error messages: "a folder", "a FIFO", ...
const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "of an unknown type";
}

}  // namespace

absl::StatusOr<int> OpenRegularFile(const std::string& path, absl::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat(what, ": opening '", path, "'"));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat(what, ": stat of '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": '", path, "' is ", FileTypeName(st.st_mode), ", expected a regular file"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, absl::string_view what, int64_t max_bytes) {
  absl::StatusOr<int> opened = OpenRegularFile(path, what);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  auto too_big = [&](int64_t size) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": '", path, "' is ", size, " bytes, expected at most ", max_bytes));
  };
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat(what, ": stat of '", path, "'"));
  }
  if (max_bytes >= 0 && st.st_size > max_bytes) {
    ::close(fd);
    return too_big(st.st_size);
  }
  std::string contents;
  contents.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat(what, ": reading '", path, "'"));
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
    // A file that grows while it is read is still held to the limit.
    if (max_bytes >= 0 && static_cast<int64_t>(contents.size()) > max_bytes) {
      ::close(fd);
      return too_big(static_cast<int64_t>(contents.size()));
    }
  }
  ::close(fd);
  return contents;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what, int64_t max_bytes) {
  return ReadRegularFile(path, what, max_bytes);
}

absl::Status CheckWritableFilePath(const std::string& path, absl::string_view flag) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": got '", path, "', expected the path of a file (not of a folder)"));
  }
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": '", path, "' is a folder, expected the path of a file to write"));
  }
  const std::string dir = DirectoryOf(path);
  if (::stat(dir.c_str(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat(flag, ": the folder '", dir, "' of '", path,
                                           "' cannot be used (it must exist before the job starts)"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(flag, ": '", dir, "' (the folder of '", path, "') is ",
                                                      FileTypeName(st.st_mode), ", expected a folder"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(flag, ": cannot create files in the folder '", dir, "' of '",
                                                      path, "' (", std::strerror(errno),
                                                      "); expected a folder this user may write"));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
