#include "server/ssp_clocks.h"

#include <algorithm>
#include <optional>
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
  if (c.finished) {
    // Back from idle (a remainder, or a stream's new records): in again where the others are, so
    // it holds nobody back more than they already do.
    c.finished = false;
    std::optional<int64_t> slowest;
    for (const auto& [r, other] : clocks_) {
      if (r == rank || other.finished || !other.known) continue;
      slowest = slowest.has_value() ? std::min(*slowest, other.clock) : other.clock;
    }
    if (slowest.has_value()) c.clock = std::max(c.clock, *slowest);
  }
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
