#include "server/ssp_clocks.h"

#include <algorithm>
#include <utility>

namespace pstrain::server {

void SspClocks::SetLive(const std::vector<int>& sorted_ranks) {
  int64_t join_clock = 0;
  bool any = false;
  for (const auto& [r, c] : clocks_) {
    if (c.finished || !c.known || !std::binary_search(sorted_ranks.begin(), sorted_ranks.end(), r)) continue;
    join_clock = any ? std::min(join_clock, c.clock) : c.clock;
    any = true;
  }
  std::map<int, Clock> next;
  for (int r : sorted_ranks) {
    auto it = clocks_.find(r);
    if (it != clocks_.end()) {
      next.emplace(r, it->second);
    } else {
      Clock c;
      c.clock = join_clock;
      next.emplace(r, c);
    }
  }
  clocks_ = std::move(next);
}

void SspClocks::NewEpoch() {
  for (auto& [r, c] : clocks_) {
    c.clock = 0;
    c.finished = false;
  }
}

void SspClocks::Pushed(int rank, int64_t step, bool same_step) {
  Clock& c = clocks_.at(rank);
  if (!same_step) c.clock = std::max(c.clock + 1, step + 1);
  c.known = true;
}

void SspClocks::Finish(int rank) { clocks_.at(rank).finished = true; }

void SspClocks::ForgetClocks() {
  for (auto& [r, c] : clocks_) c.known = false;
}

bool SspClocks::Ready(int64_t clock) const {
  for (const auto& [r, c] : clocks_) {
    if (!c.finished && c.known && c.clock < clock - staleness_) return false;
  }
  return true;
}

}  // namespace pstrain::server
