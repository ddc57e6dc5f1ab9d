#include "data/zlib_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace data {

absl::StatusOr<gzFile_s*> OpenThroughZlib(const std::string& path, unsigned buffer_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
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
