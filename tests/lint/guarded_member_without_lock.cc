// Not built: scripts/thread_safety.py compiles this file first and expects the analysis to refuse
// it, so that a pass with the analysis silently off (a flag lost, another compiler) cannot pass.
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pstrain_lint {

class Counter {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    ++count_;
  }
  int Racy() const { return count_; }  // The finding: count_ read without mu_.

 private:
  mutable absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain_lint
