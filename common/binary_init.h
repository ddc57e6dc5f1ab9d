// What every pstrain binary does first, in one place.
#ifndef PSTRAIN_COMMON_BINARY_INIT_H_
#define PSTRAIN_COMMON_BINARY_INIT_H_

namespace pstrain {

// Sets malloc up for tensor traffic (common/malloc_tuning.h), parses the command-line flags
// (removing them from argv), and sends glog's output to stderr. Call first in main(), before any
// thread starts.
void InitBinary(const char* usage, int* argc, char*** argv);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_BINARY_INIT_H_
