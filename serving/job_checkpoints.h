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
// The dense tensors' layout: `model_file`'s when given; else an external model's declaration
// (kDeclaredModelName), or the built-in model's (scheduler/job_setup.h DenseParamSpecs; an image
// model reads its training set's header). An external model's tables are its declared ones
// (kDeclaredTablesName). Errors: the files' (NOT_FOUND when the scheduler has not written them
// yet), DenseParamSpecs'; each says which.
absl::StatusOr<CheckpointExportOptions> ReadJobCheckpoints(const std::string& checkpoint_dir,
                                                           const std::string& model_file);

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_JOB_CHECKPOINTS_H_
