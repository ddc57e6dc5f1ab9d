#include "data/zlib_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace data {

absl::StatusOr<gzFile_s*> OpenThroughZlib(const std::string& path, unsigned buffer_bytes) {
  // Only a regular file: the open does not block (a FIFO without a writer would block it forever)
  // and the type is checked before the first read (a device such as /dev/zero never ends).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file (",
                                                      S_ISDIR(st.st_mode) ? "a folder" : "a FIFO, device or socket",
                                                      "), expected a data file"));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  gzFile file = gzdopen(fd, "rb");
  if (file == nullptr) {
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot allocate a zlib stream"));
  }
  gzbuffer(file, buffer_bytes);  // Must precede the first read.
  return file;
}

}  // namespace data
}  // namespace pstrain
