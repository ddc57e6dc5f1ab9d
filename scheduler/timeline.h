// A bounded history of the workers' progress reports, one point each, for the dashboard's charts
// (GET /api/timeline). When full, the oldest point goes: a long job keeps its latest `capacity`
// reports, and a client that polls with the `next` it was given never sees a point twice.
//
// Not thread-safe: the Scheduler guards it with its mutex (inside Progress). Not persisted: a
// restarted scheduler starts an empty timeline, and its sequence numbers start again at 0.
#ifndef PSTRAIN_SCHEDULER_TIMELINE_H_
#define PSTRAIN_SCHEDULER_TIMELINE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "scheduler/status_json.h"

namespace pstrain {
namespace scheduler {

class Timeline {
 public:
  // Keeps at most `capacity` (>= 1) points.
  explicit Timeline(size_t capacity = 20000);

  // Appends `point` with the next sequence number (its `seq` is overwritten), dropping the oldest
  // point when full.
  void Add(TimelinePoint point);

  // The points with seq >= `since`, oldest first, at most `max_points` of them; `*next` is the
  // `since` that asks for the points after these: one past the last returned, or, when none is
  // returned, the seq the next point will get (so a client ahead of a restarted scheduler, or
  // with a bogus `since`, starts again from there).
  std::vector<TimelinePoint> Since(int64_t since, size_t max_points, int64_t* next) const;

  size_t size() const { return points_.size(); }

 private:
  size_t capacity_;
  std::deque<TimelinePoint> points_;  // seq ascending, consecutive
  int64_t next_seq_ = 0;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_TIMELINE_H_
