#include "scheduler/stuck_barriers.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {

std::vector<StuckBarrierStatus> FindStuckBarriers(const std::vector<BarrierSet::Pending>& pending, absl::Time now,
                                                  absl::Time created, absl::Duration after,
                                                  const DescribeParticipant& describe) {
  std::vector<StuckBarrierStatus> out;
  for (const BarrierSet::Pending& p : pending) {
    // A barrier entered without a time (absl::InfinitePast) has no known age: never stuck.
    if (p.since == absl::InfinitePast() || now - p.since <= after) continue;
    StuckBarrierStatus status;
    status.name = p.name;
    status.since_seconds = absl::ToDoubleSeconds(p.since - created);
    status.waiting_seconds = absl::ToDoubleSeconds(now - p.since);
    for (const std::string& key : p.missing) status.missing.push_back(describe(key));
    out.push_back(std::move(status));
  }
  return out;
}

std::string StuckBarrierLine(const StuckBarrierStatus& barrier) {
  std::string line = absl::StrFormat("barrier '%s' has waited %.1f s for ", barrier.name, barrier.waiting_seconds);
  if (barrier.missing.empty()) absl::StrAppend(&line, "nobody it still expects");
  for (size_t i = 0; i < barrier.missing.size(); ++i) {
    const MissingParticipant& m = barrier.missing[i];
    absl::StrAppend(&line, i == 0 ? "" : ", ", m.role, " ", m.rank, m.address.empty() ? "" : " at ", m.address,
                    std::isfinite(m.last_heartbeat_seconds_ago)
                        ? absl::StrFormat(" (last heartbeat %.1f s ago)", m.last_heartbeat_seconds_ago)
                        : std::string(" (no heartbeat yet)"));
  }
  return line;
}

void StuckBarrierLog::Update(const std::vector<StuckBarrierStatus>& stuck, absl::Time now) {
  for (auto& [barrier, entry] : entries_) {
    if (entry.status.released) continue;
    // A named copy: clang (C++17) does not let a lambda capture a structured binding.
    const std::string& name = barrier;
    const bool still =
        std::any_of(stuck.begin(), stuck.end(), [&](const StuckBarrierStatus& s) { return s.name == name; });
    if (still) continue;
    entry.status.released = true;
    entry.released_at = now;
    LOG(INFO) << "barrier '" << name << "' is no longer stuck (released, or the job ended) after waiting at least "
              << absl::StrFormat("%.1f", entry.status.waiting_seconds) << " s";
  }
  for (const StuckBarrierStatus& s : stuck) {
    auto [it, fresh] = entries_.try_emplace(s.name);
    Entry& entry = it->second;
    // A name stuck again after it was released is another barrier of the same name: log it anew.
    const bool log = fresh || entry.status.released || now - entry.logged >= relog_;
    entry.status = s;
    if (log) {
      LOG(WARNING) << StuckBarrierLine(s);
      entry.logged = now;
    }
  }
  // Bounded: forget the barriers released longest ago first.
  while (entries_.size() > max_kept_) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.status.released &&
          (oldest == entries_.end() || it->second.released_at < oldest->second.released_at)) {
        oldest = it;
      }
    }
    if (oldest == entries_.end()) break;  // All still stuck: keep them.
    entries_.erase(oldest);
  }
}

std::vector<StuckBarrierStatus> StuckBarrierLog::Kept() const {
  std::vector<StuckBarrierStatus> out;
  for (const auto& [name, entry] : entries_) out.push_back(entry.status);
  return out;
}

}  // namespace scheduler
}  // namespace pstrain
