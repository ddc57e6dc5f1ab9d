#include "scheduler/timeline.h"

#include <algorithm>
#include <utility>

namespace pstrain {
namespace scheduler {

Timeline::Timeline(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void Timeline::Add(TimelinePoint point) {
  point.seq = next_seq_++;
  points_.push_back(point);
  while (points_.size() > capacity_) points_.pop_front();
}

std::vector<TimelinePoint> Timeline::Since(int64_t since, size_t max_points, int64_t* next) const {
  std::vector<TimelinePoint> out;
  *next = next_seq_;
  if (points_.empty() || since >= next_seq_) return out;
  // Sequence numbers are consecutive, so the first wanted point's index is a subtraction.
  const int64_t oldest = points_.front().seq;
  size_t i = since <= oldest ? 0 : static_cast<size_t>(since - oldest);
  for (; i < points_.size() && out.size() < max_points; ++i) out.push_back(points_[i]);
  if (!out.empty()) *next = out.back().seq + 1;
  return out;
}

}  // namespace scheduler
}  // namespace pstrain
