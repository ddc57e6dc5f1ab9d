// Names of shard checkpoint files and what a checkpoint folder holds, by file name only. The
// file format itself is server/checkpoint.h's; the scheduler needs only the names (to resume a
// job), so they live here, below both.
//
// Files are named `<dir>/server-<rank>-step-<step, 10 digits>.ckpt`. One folder may hold the files
// of every server of a job; temporary files (`.tmp`) and anything else are ignored.
//
// Thread safety: free functions with no shared state.
#ifndef PSTRAIN_COMMON_CHECKPOINT_FILES_H_
#define PSTRAIN_COMMON_CHECKPOINT_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// The job a checkpoint folder belongs to, as the scheduler writes it there (scheduler/resume.h):
// `<dir>/job.textproto`.
inline constexpr char kJobManifestName[] = "job.textproto";

// An external model's job (JobSpec.model "external"), whose workers declare the model: the first
// accepted declaration's model file (its tensors' names, shapes and initial values,
// docs/reference/model-file.md) and its tables (a JobSpec holding only `tables`, defaults
// filled in), written beside the checkpoints by the scheduler (scheduler/resume.h
// WriteDeclaration) so that tools that read them (pstrain-export, pstrain-serve) know the model.
inline constexpr char kDeclaredModelName[] = "declared-model.bin";
inline constexpr char kDeclaredTablesName[] = "declared-tables.textproto";

// A job on a data stream (JobSpec.data.stream_dir): the stream's catalog as the scheduler took it
// (a SchedulerState's StreamState as text: each file with its first position), written beside the
// checkpoints before a new file is handed out (scheduler/resume.h WriteStreamCatalog), so that a
// resumed job maps positions to the same records even once a writer has removed trained files.
inline constexpr char kStreamCatalogName[] = "stream-catalog.textproto";

// `<dir>/server-<rank>-step-<step zero-padded to 10 digits>.ckpt`.
std::string CheckpointPath(const std::string& dir, int rank, int64_t step);

// The newest step s such that `server-<r>-step-<s>.ckpt` exists in `dir` for every r in
// [0, num_servers): the newest consistent cut across servers. Only file names are looked at.
// NOT_FOUND when there is none (or no folder); INVALID_ARGUMENT for num_servers < 1.
absl::StatusOr<int64_t> LatestConsistentStep(const std::string& dir, int num_servers);

// A stretch of a job's life on one server count: its checkpoints of the steps after from_step (up
// to the next era's from_step) were taken under num_servers servers. The first era (from_step 0)
// also holds a checkpoint of step 0. A job resumed on another count starts a new era at the step
// it resumed from (common/server_counts.h keeps the list beside the checkpoints).
struct ServerCountEra {
  int64_t from_step = 0;
  int num_servers = 0;
};

// The server count `step`'s checkpoints were taken under: the last era whose from_step is below
// `step`, or the first era. `eras`: non-empty, from_step ascending.
int ServersAt(const std::vector<ServerCountEra>& eras, int64_t step);

struct ConsistentCut {
  int64_t step = 0;
  int num_servers = 0;  // the count its checkpoints were taken under
};

// The newest step s such that `server-<r>-step-<s>.ckpt` exists for every r in
// [0, ServersAt(eras, s)): the newest consistent cut of a job whose server count changed (a file
// of a rank the step's count does not have is ignored). Only file names are looked at. NOT_FOUND
// when there is none (or no folder); INVALID_ARGUMENT for no eras or a count below 1.
absl::StatusOr<ConsistentCut> LatestConsistentCut(const std::string& dir, const std::vector<ServerCountEra>& eras);

// The steps of every checkpoint file of server `rank` in `dir`, ascending; empty when the folder
// is missing or unreadable.
std::vector<int64_t> ListCheckpointSteps(const std::string& dir, int rank);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CHECKPOINT_FILES_H_
