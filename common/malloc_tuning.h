// Allocator settings for pstrain's binaries.
//
// By default glibc serves every block of 128 KiB or more with a fresh mmap and hands freed memory
// at the top of the heap back to the kernel, so each RPC that carries a tensor pays hundreds of page
// faults per MiB. Measured on our 2-core machines, keeping that memory raised end-to-end training
// throughput by about a third. Call once at the start of main(), before any thread starts.
#ifndef PSTRAIN_COMMON_MALLOC_TUNING_H_
#define PSTRAIN_COMMON_MALLOC_TUNING_H_

#include <cstdint>

namespace pstrain {

// Raises the mmap threshold to glibc's maximum (32 MiB), stops trimming the heap below 1 GiB, and
// limits glibc to two arenas, so that the memory kept is not multiplied by every thread's arena.
// A setting that the environment already makes (glibc's MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_, MALLOC_ARENA_MAX) is left as the environment made it.
// Returns false if glibc refused a setting (harmless: only speed is at stake).
bool KeepFreedMemoryForReuse();

// Returns the free memory of every heap to the kernel (glibc's malloc_trim). For after a burst of
// calls a role refused: their buffers would otherwise stay mapped below the trim threshold above.
// Costs a walk over the heaps (milliseconds); call it off the hot path.
void ReturnFreedMemoryToSystem();

// The process's resident memory in bytes (/proc/self/statm); 0 if it cannot be read. For deciding
// when to call ReturnFreedMemoryToSystem (after a role grew by a burst of refused calls).
int64_t ResidentMemoryBytes();

// An estimate of the freed memory the allocator keeps resident: the process's anonymous resident
// memory (/proc/self/statm) less the heap in use (mallinfo2). It also counts the anonymous memory
// malloc does not manage (thread stacks, the few pages a trim cannot return), a near-constant
// floor; FreedMemoryBound compares it with its value after the last trim for that reason.
// 0 if /proc/self/statm cannot be read. Costs a walk over the heaps' free lists.
int64_t KeptFreedBytes();

// Bounds the freed memory that KeepFreedMemoryForReuse keeps resident: Check() hands it back
// (ReturnFreedMemoryToSystem) once KeptFreedBytes() is more than `bound_bytes` above its value
// after the last hand-back (or construction). Under any stream of calls, refused or not, a role
// calling Check() every T seconds then holds at most its memory in use, that floor and
// `bound_bytes` at each check, and pays at most one trim (and the page faults of reusing what it
// returned) every T seconds. Not thread-safe: one thread calls Check(), off the hot path.
class FreedMemoryBound {
 public:
  explicit FreedMemoryBound(int64_t bound_bytes);

  // Returns true if it handed memory back.
  bool Check();

 private:
  const int64_t bound_bytes_;
  int64_t floor_;  // KeptFreedBytes() after the last hand-back
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_MALLOC_TUNING_H_
