#include "common/malloc_tuning.h"

#include <malloc.h>

namespace pstrain {

bool KeepFreedMemoryForReuse() {
  // 32 MiB is the largest threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
  bool ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  return ok;
}

void ReturnFreedMemoryToSystem() { malloc_trim(0); }

}  // namespace pstrain
