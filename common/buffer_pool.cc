#include "common/buffer_pool.h"

#include <cstdlib>
#include <utility>

#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr int kMinClassLog2 = 12;  // 4 KiB
constexpr size_t kAlignment = 64;

int SizeClass(size_t bytes) {
  int c = 0;
  while ((size_t{1} << (kMinClassLog2 + c)) < bytes) ++c;
  return c;
}

size_t ClassBytes(int size_class) { return size_t{1} << (kMinClassLog2 + size_class); }

}  // namespace

PooledBuffer::~PooledBuffer() { Release(); }

PooledBuffer::PooledBuffer(PooledBuffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      class_(other.class_) {}

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    class_ = other.class_;
  }
  return *this;
}

void PooledBuffer::Release() {
  if (pool_ != nullptr) pool_->Release(data_, class_);
  pool_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

BufferPool::BufferPool(int keep_per_class) : keep_per_class_(keep_per_class) {}

BufferPool::~BufferPool() {
  absl::MutexLock lock(&mu_);
  for (std::vector<char*>& list : free_) {
    for (char* p : list) std::free(p);
  }
}

BufferPool& BufferPool::Default() {
  static BufferPool* pool = new BufferPool();  // never destroyed: buffers may outlive main
  return *pool;
}

PooledBuffer BufferPool::Acquire(size_t bytes) {
  const int c = SizeClass(bytes);
  {
    absl::MutexLock lock(&mu_);
    if (c < static_cast<int>(free_.size()) && !free_[c].empty()) {
      char* p = free_[c].back();
      free_[c].pop_back();
      return PooledBuffer(this, p, bytes, c);
    }
    ++allocations_;
  }
  char* p = static_cast<char*>(std::aligned_alloc(kAlignment, ClassBytes(c)));
  CHECK(p != nullptr) << "out of memory allocating " << ClassBytes(c) << " bytes";
  return PooledBuffer(this, p, bytes, c);
}

void BufferPool::Release(char* data, int size_class) {
  {
    absl::MutexLock lock(&mu_);
    if (size_class >= static_cast<int>(free_.size())) free_.resize(size_class + 1);
    if (static_cast<int>(free_[size_class].size()) < keep_per_class_) {
      free_[size_class].push_back(data);
      return;
    }
  }
  std::free(data);
}

int64_t BufferPool::allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

}  // namespace pstrain
