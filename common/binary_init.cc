#include "common/binary_init.h"

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/malloc_tuning.h"

namespace pstrain {

void InitBinary(const char* usage, int* argc, char*** argv) {
  KeepFreedMemoryForReuse();
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineFlags(argc, argv, /*remove_flags=*/true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging((*argv)[0]);
}

}  // namespace pstrain
