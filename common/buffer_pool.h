// Reusable, aligned buffers for tensor payloads.
//
// A server answers every pull with a copy of its weights that gRPC sends after the handler has
// returned, so the copy needs a buffer of its own per answer. Allocating it fresh each time costs
// a fresh mapping and a page fault per 4 KiB when glibc hands large blocks back to the kernel;
// a pool keeps the buffers of past answers and hands them out again, so a steady stream of
// answers of the same sizes allocates nothing.
//
// Buffers come in power-of-two size classes from 4 KiB up, 64-byte aligned (a cache line, and
// enough for any SIMD load). Each class keeps at most a few free buffers; a buffer released to a
// full class is freed. Thread-safe.
#ifndef PSTRAIN_COMMON_BUFFER_POOL_H_
#define PSTRAIN_COMMON_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace pstrain {

class BufferPool;

// A buffer from a pool (or none). Move-only; goes back to its pool when destroyed.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  ~PooledBuffer();
  PooledBuffer(PooledBuffer&& other) noexcept;
  PooledBuffer& operator=(PooledBuffer&& other) noexcept;
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;

  char* data() const { return data_; }
  float* floats() const { return reinterpret_cast<float*>(data_); }
  // The bytes asked for (the buffer may be larger).
  size_t size() const { return size_; }

 private:
  friend class BufferPool;
  PooledBuffer(BufferPool* pool, char* data, size_t size, int size_class)
      : pool_(pool), data_(data), size_(size), class_(size_class) {}
  void Release();

  BufferPool* pool_ = nullptr;
  char* data_ = nullptr;
  size_t size_ = 0;
  int class_ = 0;
};

class BufferPool {
 public:
  // `keep_per_class`: free buffers kept per size class.
  explicit BufferPool(int keep_per_class = 8);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The process-wide pool.
  static BufferPool& Default();

  // A buffer of at least `bytes` bytes (0 is allowed), 64-byte aligned.
  PooledBuffer Acquire(size_t bytes);

  // Buffers allocated from the system so far (not counting reuses): what tests and benchmarks
  // watch to see that the steady state allocates nothing.
  int64_t allocations() const;

 private:
  friend class PooledBuffer;
  void Release(char* data, int size_class);

  const int keep_per_class_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<char*>> free_ ABSL_GUARDED_BY(mu_);  // by size class
  int64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_BUFFER_POOL_H_
