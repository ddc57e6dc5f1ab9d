// TableHistory: each server's embedding tables over the run, for the dashboard's table panel
// (GET /api/status "table_history"): per server, points (seconds since the scheduler started,
// rows, bytes, rows evicted so far) summed over every table the server holds, its own shard's and
// a copy's alike, since both take its memory.
//
// Bounded whatever the run's length: at most kMaxPoints per server. A server's heartbeats add a
// point only once `spacing` (at first a quarter second) has passed since its last one; when its points
// reach kMaxPoints, every other one goes (the first and the last stay) and its spacing doubles. So
// the history always spans the whole run, at a resolution that halves as the run doubles. Servers
// are kept by rank; a replaced server goes on in its rank's series.
//
// Thread safety: none; the Scheduler calls it under its mutex.
#ifndef PSTRAIN_SCHEDULER_TABLE_HISTORY_H_
#define PSTRAIN_SCHEDULER_TABLE_HISTORY_H_

#include <cstddef>
#include <map>
#include <vector>

#include "proto/scheduler.pb.h"
#include "scheduler/status_json.h"

namespace pstrain {
namespace scheduler {

class TableHistory {
 public:
  static constexpr size_t kMaxPoints = 256;
  static constexpr double kFirstSpacingSeconds = 0.25;

  // A heartbeat of server `rank` at `seconds` carried `usages` (not empty).
  void Add(int rank, double seconds, const google::protobuf::RepeatedPtrField<TableUsage>& usages);

  // Every server's series, by ascending rank.
  std::vector<TableSizeSeries> Series() const;

 private:
  struct OneServer {
    double spacing = kFirstSpacingSeconds;
    std::vector<TableSizePoint> points;
  };
  std::map<int, OneServer> servers_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_TABLE_HISTORY_H_
