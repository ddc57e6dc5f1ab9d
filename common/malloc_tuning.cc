#include "common/malloc_tuning.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace pstrain {
namespace {

struct Statm {
  int64_t resident = 0;  // bytes
  int64_t shared = 0;    // bytes backed by a file or shared memory
};

bool ReadStatm(Statm* out) {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0, shared = 0;
  if (!(statm >> pages >> resident >> shared)) return false;
  const int64_t page = sysconf(_SC_PAGESIZE);
  out->resident = resident * page;
  out->shared = shared * page;
  return true;
}

}  // namespace

bool KeepFreedMemoryForReuse() {
  // An operator's own glibc settings (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
  // MALLOC_ARENA_MAX in the environment) win over these defaults.
  auto set = [](int param, int value, const char* env) {
    return std::getenv(env) != nullptr || mallopt(param, value) == 1;
  };
  // 32 MiB is the largest threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
  bool ok = set(M_MMAP_THRESHOLD, 32 << 20, "MALLOC_MMAP_THRESHOLD_");
  ok = set(M_TRIM_THRESHOLD, 1 << 30, "MALLOC_TRIM_THRESHOLD_") && ok;
  // Freed memory is kept per arena, and glibc opens up to 8 arenas a core as new threads (gRPC's)
  // allocate: each one warms up to the working set of the threads that passed through it, so RSS
  // crept up for minutes (a server: +5% in 90 s of a sync job). Two arenas cap what is kept at
  // two working sets; the demo's samples/s stayed within noise.
  ok = set(M_ARENA_MAX, 2, "MALLOC_ARENA_MAX") && ok;
  return ok;
}

void ReturnFreedMemoryToSystem() { malloc_trim(0); }

int64_t ResidentMemoryBytes() {
  Statm statm;
  return ReadStatm(&statm) ? statm.resident : 0;
}

int64_t KeptFreedBytes() {
  Statm statm;
  if (!ReadStatm(&statm)) return 0;
  const struct mallinfo2 heap = mallinfo2();
  // uordblks: the arenas' chunks in use; hblkhd: blocks served by mmap (always resident in full
  // once written, and unmapped when freed).
  return statm.resident - statm.shared - static_cast<int64_t>(heap.uordblks + heap.hblkhd);
}

FreedMemoryBound::FreedMemoryBound(int64_t bound_bytes) : bound_bytes_(bound_bytes), floor_(KeptFreedBytes()) {}

bool FreedMemoryBound::Check() {
  if (KeptFreedBytes() <= floor_ + bound_bytes_) return false;
  ReturnFreedMemoryToSystem();
  floor_ = KeptFreedBytes();
  return true;
}

}  // namespace pstrain
