// The history of a job's server counts, kept beside its checkpoints as `server_counts.textproto`
// (a ServerCountHistory, proto/job.proto), so that anything reading the folder knows which server
// count each checkpoint was taken under (docs/design/resharding.md, "Resuming on another server
// count").
//
// A job starts with one era, (0, --servers). A job resumed on another count continues from the cut
// of step S, taken under the old count, and starts an era (S, new count): its own checkpoints are
// of steps after S. Eras after S (runs whose files after S were abandoned by the resume) are
// dropped. A folder without the file (written before it existed) reads as one era of the count in
// its job manifest.
//
//   eras (0, 2) (300, 3)  ->  steps <= 300 were cut on 2 servers, steps > 300 on 3.
//
// Thread safety: free functions with no shared state.
#ifndef PSTRAIN_COMMON_SERVER_COUNTS_H_
#define PSTRAIN_COMMON_SERVER_COUNTS_H_

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint_files.h"
#include "proto/cluster.pb.h"

namespace pstrain {

// `server_counts.textproto`.
inline constexpr char kServerCountsName[] = "server_counts.textproto";

// The eras in `<dir>/server_counts.textproto`; when there is no such file, one era (0,
// manifest_servers). Errors name the path: DATA_LOSS for text that does not parse, INVALID_ARGUMENT
// for no eras, a count below 1, a first era not from step 0, or from_steps not ascending.
absl::StatusOr<std::vector<ServerCountEra>> ReadServerCounts(const std::string& dir, int manifest_servers);

// Writes `eras` as `<dir>/server_counts.textproto`, atomically, with permission bits `mode`.
absl::Status WriteServerCounts(const std::string& dir, const std::vector<ServerCountEra>& eras, mode_t mode);

// The history of a job that continues from the cut of `step` on `num_servers` servers: the eras
// that hold steps up to `step` (the first era, and those from before `step`), then (step,
// num_servers) when that is another count than the step's own. From step 0: one era (0, num_servers).
std::vector<ServerCountEra> ContinueFrom(const std::vector<ServerCountEra>& eras, int64_t step, int num_servers);

// The server count `map` is for: its ShardMap.num_servers, or `job_servers` (JobSpec.num_servers)
// for a map that does not say (the first map of a job from before the field).
int ServersOfMap(const ShardMap& map, int job_servers);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SERVER_COUNTS_H_
