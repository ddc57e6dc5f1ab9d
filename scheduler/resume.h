// Resuming a whole job from its checkpoint folder (JobSpec.resume, `--resume`).
//
// A job that checkpoints also leaves its own description beside the shard files: the scheduler
// writes `<checkpoint_dir>/job.textproto` (the JobSpec after defaults) when it starts. A later run
// with resume set reads it back to
//   - refuse a job that cannot continue those checkpoints (another model, split, mode, seed, data
//     subset or optimizer), naming the first field that differs;
//   - keep the global batch of the first run, so the step count and the data position of every
//     step stay what they were even when the number of workers changes;
// and takes the newest step every server has a checkpoint of (a consistent cut) as the step to
// continue from. The cut may be of another server count than the resumed job's: the history of
// server counts beside the checkpoints (common/server_counts.h) says which count each step's
// files were taken under, and the servers re-cut such a cut into the new count's shards as they
// restore it (server/checkpoint_reshard.h). The scheduler then publishes it as the view's restore_step from the start:
// each server restores its shard of that step before it serves, and workers begin at that step's data position.
//
// The scheduler must see the checkpoint folder (one shared folder, as the launcher and a shared
// volume give). Thread safety: free functions with no shared state.
#ifndef PSTRAIN_SCHEDULER_RESUME_H_
#define PSTRAIN_SCHEDULER_RESUME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_files.h"
#include "common/server_counts.h"
#include "proto/job.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

// kJobManifestName ("job.textproto") is common/checkpoint_files.h's.

// `<job.checkpoint_dir>/job.textproto`.
std::string JobManifestPath(const JobSpec& job);

// Writes `job` (after ApplyJobDefaults) as the manifest, atomically, creating the folder.
// Errors name the path.
absl::Status WriteJobManifest(const JobSpec& job);

// An external model's first accepted declaration, beside the checkpoints: its model file as
// kDeclaredModelName and `tables` (adopted, defaults filled in) as kDeclaredTablesName
// (common/checkpoint_files.h), each atomically with the job's output mode. Errors name the path.
absl::Status WriteDeclaration(const JobSpec& job, absl::string_view model_file,
                              const google::protobuf::RepeatedPtrField<TableSpec>& tables);

// A job on a data stream: `catalog` (its files and end; no scores) as kStreamCatalogName beside
// the checkpoints, atomically with the job's output mode. Errors name the path.
absl::Status WriteStreamCatalog(const JobSpec& job, const StreamState& catalog);
// What WriteStreamCatalog wrote; an empty catalog when the folder holds none (a job stopped before
// its first file). Errors name the path (DATA_LOSS for text that does not parse).
absl::StatusOr<StreamState> ReadStreamCatalog(const JobSpec& job);

// For a new job (resume not set): OK unless job.checkpoint_dir already holds shard checkpoints
// of an earlier run for one of the job's server ranks; then FAILED_PRECONDITION naming the folder
// and what it holds, and saying to pass --resume to continue that job or to use an empty folder.
absl::Status CheckNoEarlierCheckpoints(const JobSpec& job);

struct ResumePoint {
  // The newest consistent cut: every server of its count has a checkpoint of this step.
  int64_t step = 0;
  // The server count the cut was taken under; another than job.num_servers() means re-sharding.
  int num_servers = 0;
  // The first run's global batch, which the resumed job keeps.
  int64_t global_batch = 0;
  // The history of server counts for the resumed job to write (ContinueFrom the cut on
  // job.num_servers() servers).
  std::vector<ServerCountEra> server_counts;
};

// For `job` (after ApplyJobDefaults, resume set): reads the manifest and checks that `job` can
// continue it, then finds the newest consistent cut (LatestConsistentCut over the folder's history
// of server counts). NOT_FOUND when the manifest or a consistent cut is missing; INVALID_ARGUMENT
// "resume: seed is 3, but the job in DIR/job.textproto had 2; expected the same" for an
// incompatible job or a malformed manifest, and for a job whose mode is not SYNC; the error of
// ReadServerCounts for a bad history.
absl::StatusOr<ResumePoint> FindResumePoint(const JobSpec& job);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_RESUME_H_
