// Reading, completing and checking a JobSpec (proto/job.proto).
//
// The scheduler and the launcher both call these, so a bad job fails before any process starts.
#ifndef PSTRAIN_COMMON_JOB_SPEC_H_
#define PSTRAIN_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/table_spec.h"  // kExternalModel
#include "proto/job.pb.h"

namespace pstrain {

// The folder Debian's dataset-fashion-mnist package installs.
inline constexpr char kDefaultDataDir[] = "/usr/share/datasets/fashion-mnist";

// The largest model a job may describe, in parameters (float32 values: 4 GiB), and the widest
// hidden layer. Checked before anything is allocated, so a typo such as --hidden=2000000000 is a
// clear error instead of an allocation failure.
inline constexpr int64_t kMaxModelParameters = int64_t{1} << 30;
inline constexpr int32_t kMaxHiddenWidth = 1 << 20;
// The most servers a job may grow to (JobSpec.max_servers, pstrain-ctl scale).
inline constexpr int32_t kMaxJobServers = 1024;

// Workers a job admits beyond num_workers unless max_workers says otherwise (JobSpec.max_workers).
inline constexpr int kDefaultSpareWorkers = 2;

// Checkpoint cuts a server keeps restorable: JobSpec.keep_checkpoints, 2 when unset (0), the fewest
// that always leave a cut every server has written; at most kMaxKeepCheckpoints.
inline constexpr int32_t kMaxKeepCheckpoints = 100000;
inline int32_t KeptCheckpoints(const JobSpec& job) { return job.keep_checkpoints() > 0 ? job.keep_checkpoints() : 2; }

// Whether the job's model is declared by its workers (JobSpec.model "external").
inline bool IsExternalModel(const JobSpec& job) { return job.model() == kExternalModel; }

// Whether the job trains on a data stream (JobSpec.data.stream_dir) rather than a training file.
inline bool IsStreamJob(const JobSpec& job) { return !job.data().stream_dir().empty(); }

// Parses a JobSpec textproto file. Errors name `what` (e.g. "--config (job config)"), the file and,
// for syntax errors, line and column; FAILED_PRECONDITION for anything but a regular file of at
// most kMaxFlagFileBytes (common/file_io.h; a folder, a FIFO, a device), which is never read.
absl::StatusOr<JobSpec> ReadJobSpecFile(const std::string& path, absl::string_view what = "job config");

// Fills every unset field with its documented default (proto/job.proto). Some defaults depend on
// other fields, which are completed first: batch_size, epochs and optimizer.lr on the model (cnn:
// 64, 8; every other model: 256, 10; lr by optimizer type, the same for both models), optimizer.weight_decay on
// the optimizer type (0.01 for ADAMW, else 0), global_batch on batch_size. Idempotent.
void ApplyJobDefaults(JobSpec* job);

// Checks a job after ApplyJobDefaults. INVALID_ARGUMENT names the field, the value and what was
// expected, e.g. "optimizer.lr: got -0.1, expected > 0".
absl::Status ValidateJobSpec(const JobSpec& job);

// Whether the job's servers write checkpoints: a folder and a step or a time interval. Server
// recovery from checkpoints depends on it.
bool CheckpointsOn(const JobSpec& job);

// Whether SYNC workers push layer by layer during backward (JobSpec.overlap; unset means on).
// Never with gradient clipping, which must see the whole gradient before anything is pushed, nor
// with embedding tables, whose row gradients travel with the whole push.
inline bool OverlapOn(const JobSpec& job) {
  return job.mode() == SYNC && job.optimizer().clip_grad_norm() == 0 && job.tables().empty() &&
         (!job.has_overlap() || job.overlap());
}

// Flag spellings of the enums: "sync"/"async"/"ssp", "sgd"/"momentum"/"nesterov"/"adam"/"adamw"/"adagrad",
// "constant"/"step"/"cosine". Unknown names give INVALID_ARGUMENT listing the accepted ones.
absl::StatusOr<Mode> ParseMode(absl::string_view name);
absl::StatusOr<OptimizerSpec::Type> ParseOptimizer(absl::string_view name);
absl::StatusOr<LrSchedule::Type> ParseLrSchedule(absl::string_view name);
std::string ModeName(Mode mode);
std::string OptimizerName(OptimizerSpec::Type type);

// The job as one line of text, for logs.
std::string JobSpecToText(const JobSpec& job);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_SPEC_H_
