// What every pstrain binary does first, in one place.
#ifndef PSTRAIN_COMMON_BINARY_INIT_H_
#define PSTRAIN_COMMON_BINARY_INIT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pstrain {

// The prefix of the environment variables that stand for flags: PSTRAIN_PORT=7001 is --port=7001.
inline constexpr char kFlagEnvPrefix[] = "PSTRAIN_";

// Sets malloc up for tensor traffic (common/malloc_tuning.h), applies the flags given in the
// environment (SetFlagsFromEnvironment; a bad value exits 2 with a message naming the variable),
// parses the command-line flags (removing them from argv; a flag on the command line wins over
// the environment), and sends glog's output to stderr. Call first in main(), before any thread
// starts.
void InitBinary(const char* usage, int* argc, char*** argv);

// Every variable PSTRAIN_<NAME> in the environment whose lower-cased NAME is a flag of this binary
// sets that flag, as if `--name=value` had been given on the command line (so the flag no longer
// counts as left at its default). Variables that name no flag of this binary are skipped (one pod
// spec may hold the variables of several binaries) and their names appended to `unknown`, if not
// null. INVALID_ARGUMENT for a value the flag does not accept, naming the variable, its value and
// what was expected; flags set before the bad variable stay set. Call before parsing the command
// line, from one thread.
absl::Status SetFlagsFromEnvironment(std::vector<std::string>* unknown);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_BINARY_INIT_H_
