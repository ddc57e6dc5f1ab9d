// Small file helpers shared by the model file, server checkpoints and the scheduler's outputs.
// No gRPC here: any library may use them (library `pstrain_file_io`).
#ifndef PSTRAIN_COMMON_FILE_IO_H_
#define PSTRAIN_COMMON_FILE_IO_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// A status for a failed system call: the canonical code for `err` (NOT_FOUND for ENOENT,
// PERMISSION_DENIED for EACCES, ...) and "<what>: <strerror>".
absl::Status ErrnoStatus(int err, absl::string_view what);

// The permission bits of the files a job writes for its user (the final model, the run summary,
// checkpoints) unless JobSpec.output_mode (--output_mode) says otherwise: readable by the owner only.
inline constexpr mode_t kDefaultOutputMode = 0600;

// JobSpec.output_mode as permission bits: kDefaultOutputMode for 0 (unset).
inline mode_t OutputMode(uint32_t job_output_mode) {
  return job_output_mode == 0 ? kDefaultOutputMode : static_cast<mode_t>(job_output_mode);
}

// Writes `path` so that a reader never sees it partly written, and it survives a crash once this
// returns OK: `write` fills a fresh temporary file beside `path` (given its descriptor), which is
// then fsynced, given `mode` (the owner's only unless the caller shares it), renamed over
// `path`, and the folder fsynced. On any error the temporary file is removed and `path` is
// untouched. `what` names the file in errors ("model file", "checkpoint").
absl::Status WriteFileAtomically(const std::string& path, absl::string_view what,
                                 const std::function<absl::Status(int fd)>& write, mode_t mode = kDefaultOutputMode);

// The same for contents already in memory.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view what, absl::string_view contents,
                                 mode_t mode = kDefaultOutputMode);

// Writes all `size` bytes to `fd` (retrying short writes and EINTR). Errors name `path`.
absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path);

// The largest small file a binary reads whole for a flag: a job config (--config), a TLS
// certificate, key or CA, a token file.
inline constexpr int64_t kMaxFlagFileBytes = int64_t{16} << 20;

// No limit on a file's size: ReadWholeFile's default.
inline constexpr int64_t kNoSizeLimit = -1;

// Opens `path` for reading only if it is a regular file, without ever blocking: the open is
// non-blocking (a FIFO with no writer would block it) and the file type is checked on the open
// descriptor before anything is read. Returns the descriptor (blocking again; the caller closes
// it). Errors name `what` (e.g. "--config (job config)") and `path`: the errno's code for a failed
// open (NOT_FOUND, PERMISSION_DENIED, ...); FAILED_PRECONDITION "... is a folder (a FIFO, a
// character device, ...), expected a regular file".
absl::StatusOr<int> OpenRegularFile(const std::string& path, absl::string_view what);

// The whole of a regular file (OpenRegularFile), read only after its size was checked against
// `max_bytes` (kNoSizeLimit: none): FAILED_PRECONDITION "... is N bytes, expected at most M",
// also when it grows past the limit while being read. Other errors as OpenRegularFile's, or the
// errno's code for a failed read; all name `what` and `path`. Blocks on disk I/O.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, absl::string_view what, int64_t max_bytes);

// ReadRegularFile(path, what, max_bytes) under its older name.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what,
                                          int64_t max_bytes = kNoSizeLimit);

// Checks at start-up that a file can later be written at `path` (e.g. --final_model, written at
// the end of a job): its folder exists, is a folder, and this process may create files in it;
// and `path` itself is not a folder. FAILED_PRECONDITION (or the errno's code) naming `flag`, the
// path and what was expected. Creates nothing.
absl::Status CheckWritableFilePath(const std::string& path, absl::string_view flag);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_FILE_IO_H_
