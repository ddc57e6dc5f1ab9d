#include "scheduler/barrier.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace scheduler {

void BarrierSet::Enter(const std::string& name, int count, const std::string& key, Done done) {
  absl::Status answer;  // What `done` gets now, if it is not parked.
  std::vector<Done> released;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) {
      answer = failure_;
    } else if (count < 1) {
      answer = absl::InvalidArgumentError(
          absl::StrCat("barrier '", name, "': got ", count, " participants, expected >= 1"));
    } else {
      Barrier& barrier = barriers_[name];
      if (barrier.count == 0) barrier.count = count;
      if (barrier.count != count) {
        answer = absl::InvalidArgumentError(
            absl::StrCat("barrier '", name, "' entered by ", key, ": got ", count,
                         " participants, expected ", barrier.count, " as its first participant said"));
      } else if (!barrier.released) {
        barrier.keys.insert(key);
        barrier.parked.push_back(std::move(done));
        if (static_cast<int>(barrier.keys.size()) < barrier.count) return;
        barrier.released = true;
        released.swap(barrier.parked);
      }
      // A released barrier answers OK at once: `answer` is OK and `done` still ours.
    }
  }
  if (!released.empty()) {
    for (Done& d : released) d(absl::OkStatus());
    return;
  }
  done(answer);
}

void BarrierSet::FailAll(absl::Status status) {
  std::vector<Done> parked;
  absl::Status answer;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(status);
    answer = failure_;
    for (auto& [name, barrier] : barriers_) {
      for (Done& d : barrier.parked) parked.push_back(std::move(d));
      barrier.parked.clear();
    }
  }
  for (Done& d : parked) d(answer);
}

int BarrierSet::num_pending() const {
  absl::MutexLock lock(&mu_);
  int pending = 0;
  for (const auto& [name, barrier] : barriers_) pending += barrier.parked.empty() ? 0 : 1;
  return pending;
}

}  // namespace scheduler
}  // namespace pstrain
