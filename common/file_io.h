// Small file helpers shared by the model file, server checkpoints and the scheduler's outputs.
// No gRPC here: any library may use them (library `pstrain_file_io`).
#ifndef PSTRAIN_COMMON_FILE_IO_H_
#define PSTRAIN_COMMON_FILE_IO_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// A status for a failed system call: the canonical code for `err` (NOT_FOUND for ENOENT,
// PERMISSION_DENIED for EACCES, ...) and "<what>: <strerror>".
absl::Status ErrnoStatus(int err, absl::string_view what);

// Writes `path` so that a reader never sees it partly written, and it survives a crash once this
// returns OK: `write` fills a fresh temporary file beside `path` (given its descriptor), which is
// then fsynced, given `mode` (world-readable 0644 unless the file holds a secret), renamed over
// `path`, and the folder fsynced. On any error the temporary file is removed and `path` is
// untouched. `what` names the file in errors ("model file", "checkpoint").
absl::Status WriteFileAtomically(const std::string& path, absl::string_view what,
                                 const std::function<absl::Status(int fd)>& write, mode_t mode = 0644);

// The same for contents already in memory.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view what,
                                 absl::string_view contents, mode_t mode = 0644);

// Writes all `size` bytes to `fd` (retrying short writes and EINTR). Errors name `path`.
absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path);

// The whole file. NOT_FOUND if it does not exist; errors name `what` and `path`.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_FILE_IO_H_
