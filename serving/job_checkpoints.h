// What reading a job's checkpoint folder needs besides the files: the job (the folder's
// job.textproto, which the scheduler writes) and its dense tensors' layout (the job's built-in
// model's, or a model file's). Shared by pstrain-export and pstrain-serve.
//
// Thread safety: a free function; it reads files.
#ifndef PSTRAIN_SERVING_JOB_CHECKPOINTS_H_
#define PSTRAIN_SERVING_JOB_CHECKPOINTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "serving/checkpoint_export.h"

namespace pstrain::serving {

// Options for ExportCheckpoints / CheckpointFollower over `checkpoint_dir` (step -1: the newest).
// `model_file` empty: the built-in model's tensors (scheduler/job_setup.h DenseParamSpecs; an
// image model reads its training set's header); else that model file's. Errors: the job file's
// (NOT_FOUND when the scheduler has not written it), the model file's, DenseParamSpecs'; each
// says which.
absl::StatusOr<CheckpointExportOptions> ReadJobCheckpoints(const std::string& checkpoint_dir,
                                                           const std::string& model_file);

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_JOB_CHECKPOINTS_H_
