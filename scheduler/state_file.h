// The file in --state_dir that holds the scheduler's state (proto/scheduler_state.proto), so that
// a restarted scheduler goes on with the job.
//
// Layout of <state_dir>/scheduler.state (little-endian):
//
//   offset  size  field
//   0       8     magic "PSTRAINS"
//   8       4     uint32 format version (1)
//   12      8     uint64 payload size N
//   20      N     SchedulerState, protobuf binary
//   20+N    4     uint32 CRC-32 (zlib crc32) of every byte before it
//
// Written atomically (common/file_io.h: temporary file, fsync, rename, fsync of the folder), so a
// crash leaves the previous state or the new one, never a mix; the checksum catches a file damaged
// afterwards.
//
// Thread-safe: Save may be called from several threads at once.
#ifndef PSTRAIN_SCHEDULER_STATE_FILE_H_
#define PSTRAIN_SCHEDULER_STATE_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

// The file's bytes for `state`.
std::string EncodeSchedulerState(const SchedulerState& state);

// Parses the file's bytes; `path` names the file in errors. DATA_LOSS, saying what is wrong and
// where ("too short", "bad magic", "payload size", "checksum", "does not parse"), for anything but
// a complete file of format version 1; FAILED_PRECONDITION for another format version.
absl::StatusOr<SchedulerState> DecodeSchedulerState(absl::string_view bytes, absl::string_view path);

class StateFile {
 public:
  // Uses <dir>/scheduler.state, creating `dir` (and its parents) if missing. INVALID_ARGUMENT for
  // an empty dir; the system's error when it cannot be created or is not a folder.
  static absl::StatusOr<std::unique_ptr<StateFile>> Open(const std::string& dir);

  const std::string& path() const { return path_; }

  // The saved state; nullopt when there is no file yet (a fresh job). Errors as
  // DecodeSchedulerState, or the system's when the file cannot be read.
  absl::StatusOr<std::optional<SchedulerState>> Load() const;

  // Makes `state` durable unless a state of a higher version was saved already (it holds every
  // change this one does) or the bytes equal the last ones saved. Blocks for the write and its
  // fsyncs. The system's error when the file cannot be written; the previous file then stays.
  absl::Status Save(int64_t version, const SchedulerState& state);

  // External model (JobSpec.model "external"): the model file of the accepted declaration, kept
  // as <dir>/declared_model.bin beside the state (written atomically, as the state), so a
  // restarted scheduler can hand the servers the same initial values. The state records that a
  // declaration was accepted; SaveDeclaredModel comes first. Blocks for the write and its fsyncs;
  // the system's error when it cannot be written.
  absl::Status SaveDeclaredModel(absl::string_view model_file);
  // The bytes SaveDeclaredModel saved; NOT_FOUND when there are none, the system's error otherwise.
  absl::StatusOr<std::string> LoadDeclaredModel() const;
  const std::string& declared_model_path() const { return declared_model_path_; }

  // Number of files written, for tests and logs.
  int64_t writes() const;

 private:
  StateFile(std::string path, std::string declared_model_path)
      : path_(std::move(path)), declared_model_path_(std::move(declared_model_path)) {}

  const std::string path_;
  const std::string declared_model_path_;
  mutable absl::Mutex mu_;
  int64_t saved_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::string saved_bytes_ ABSL_GUARDED_BY(mu_);
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_STATE_FILE_H_
