#include "common/malloc_tuning.h"

#include <malloc.h>
#include <unistd.h>

#include <fstream>

namespace pstrain {

bool KeepFreedMemoryForReuse() {
  // 32 MiB is the largest threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
  bool ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  // Freed memory is kept per arena, and glibc opens up to 8 arenas a core as new threads (gRPC's)
  // allocate: each one warms up to the working set of the threads that passed through it, so RSS
  // crept up for minutes (a server: +5% in 90 s of a sync job). Two arenas cap what is kept at
  // two working sets; the demo's samples/s stayed within noise.
  ok = mallopt(M_ARENA_MAX, 2) == 1 && ok;
  return ok;
}

void ReturnFreedMemoryToSystem() { malloc_trim(0); }

int64_t ResidentMemoryBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

}  // namespace pstrain
