// Command-line flags that describe a job, shared by pstrain-scheduler and pstrain-launch.
//
// Only binaries link this (library `pstrain_job_flags`): libraries take a JobSpec, never flags.
// Each flag overrides the field of the same name in the `--config` file when it is given on the
// command line; flags left at their defaults leave the file's value alone.
#ifndef PSTRAIN_COMMON_JOB_FLAGS_H_
#define PSTRAIN_COMMON_JOB_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

// Builds the job from --config (if any) and the job flags, applies defaults and validates; also
// checks that --final_model's folder exists and is writable (CheckWritableFilePath), since the model
// is written only when the job ends. Call after gflags has parsed the command line.
absl::StatusOr<JobSpec> JobSpecFromFlags();

// The job flags given explicitly on this command line, as "--name=value" strings, so that a
// launcher can hand them on to the scheduler unchanged.
std::vector<std::string> ExplicitJobFlags();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_FLAGS_H_
