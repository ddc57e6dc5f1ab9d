// Named one-shot barriers.
//
// A barrier is created by its first Enter, with the number of participants it waits for. Each
// Enter parks a callback; when `count` distinct participants (keys) have entered, every parked
// callback runs with OK and the barrier stays released: a later Enter of the same name (a retry
// whose answer was lost) is answered OK at once. The same key entering twice counts once, and
// both of its callbacks are answered.
//
//   Enter(a) -> parked    Enter(a) -> parked    Enter(b) -> released: a, a, b get OK
//
// FailAll(status) answers every parked callback with `status` and every later Enter too (the job
// has ended; nothing will release them).
//
// Thread-safe. Callbacks run on the calling thread after the internal lock is released, so they
// may call back into the BarrierSet or take other locks.
#ifndef PSTRAIN_SCHEDULER_BARRIER_H_
#define PSTRAIN_SCHEDULER_BARRIER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {
namespace scheduler {

class BarrierSet {
 public:
  using Done = std::function<void(absl::Status)>;

  BarrierSet() = default;
  BarrierSet(const BarrierSet&) = delete;
  BarrierSet& operator=(const BarrierSet&) = delete;

  // Enters participant `key` (e.g. "worker 1") into barrier `name`, which waits for `count`
  // participants. `done` runs exactly once: OK on release; INVALID_ARGUMENT at once when count < 1
  // or the barrier was created with another count; the FailAll status when the set has failed.
  // Never blocks.
  void Enter(const std::string& name, int count, const std::string& key, Done done);

  // Answers every parked callback, and every later Enter, with `status` (not OK). Idempotent: the
  // first status stays.
  void FailAll(absl::Status status);

  // Number of barriers with parked callbacks. For tests.
  int num_pending() const;

 private:
  struct Barrier {
    int count = 0;
    bool released = false;
    absl::flat_hash_set<std::string> keys;
    std::vector<Done> parked;
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Barrier> barriers_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_BARRIER_H_
