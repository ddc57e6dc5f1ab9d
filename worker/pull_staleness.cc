#include "worker/pull_staleness.h"

#include <algorithm>

namespace pstrain::worker {

std::optional<int64_t> PullStaleness::PushPulled(int shard, int64_t step) {
  const std::optional<int64_t> previous = last_[shard];
  last_[shard] = step;
  if (!previous.has_value()) return std::nullopt;
  return std::max<int64_t>(0, step - *previous - 1);
}

}  // namespace pstrain::worker
