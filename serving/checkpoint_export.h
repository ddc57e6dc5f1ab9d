// A model export (serving/model_export.h) built from a job's checkpoint folder: every server's
// checkpoint of one cut, each read through its chain (server/checkpoint_chain.h), the dense chunks
// put back into the model's tensors and each table's rows gathered from every server, keys
// ascending, values as the servers store them. What pstrain-export runs.
//
// Thread safety: a free function; it blocks on reading every file of the cut.
#ifndef PSTRAIN_SERVING_CHECKPOINT_EXPORT_H_
#define PSTRAIN_SERVING_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/param_spec.h"
#include "proto/job.pb.h"
#include "server/checkpoint.h"
#include "serving/model_export.h"

namespace pstrain::serving {

struct CheckpointExportOptions {
  // The job's checkpoint folder and the job written there (job.textproto, after defaults).
  std::string checkpoint_dir;
  JobSpec job;
  // The dense tensors, in the model's order (names, shapes, flat offsets): the model the job
  // trains (scheduler/job_setup.h DenseParamSpecs, or a model file's).
  std::vector<model::ParamSpec> params;
  // The cut to export; -1: the newest every server has.
  int64_t step = -1;
};

// The export of the cut. Errors: NOT_FOUND when no cut (or not that step) is there for every
// server; the chain's errors (server/checkpoint_chain.h); FAILED_PRECONDITION when the checkpoints
// do not fit `params` or the job's tables (a chunk outside its tensor, elements covered twice or
// not at all, another number of tables, a table of another dim); DATA_LOSS for a table that does
// not parse or a key on two servers. Each names the server and step.
absl::StatusOr<ModelExport> ExportCheckpoints(const CheckpointExportOptions& options);

// The same from checkpoints already read: `shards` holds every server's whole checkpoint of one
// cut (chains merged), in rank order; options.step is not used. INVALID_ARGUMENT when they are
// not that; the other errors as ExportCheckpoints'.
absl::StatusOr<ModelExport> AssembleExport(const std::vector<server::ShardCheckpoint>& shards,
                                           const CheckpointExportOptions& options);

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_CHECKPOINT_EXPORT_H_
