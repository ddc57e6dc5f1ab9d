#include "scheduler/table_history.h"

#include <utility>

namespace pstrain {
namespace scheduler {

void TableHistory::Add(int rank, double seconds, const google::protobuf::RepeatedPtrField<TableUsage>& usages) {
  OneServer& server = servers_[rank];
  if (!server.points.empty() && seconds - server.points.back().seconds < server.spacing) return;
  TableSizePoint point;
  point.seconds = seconds;
  for (const TableUsage& u : usages) {
    point.rows += u.rows();
    point.bytes += u.bytes();
    point.evicted += u.evicted();
  }
  server.points.push_back(point);
  if (server.points.size() < kMaxPoints) return;
  // Keep points 0, 2, 4, ... and the newest.
  std::vector<TableSizePoint> kept;
  kept.reserve(kMaxPoints / 2 + 1);
  for (size_t i = 0; i + 1 < server.points.size(); i += 2) kept.push_back(server.points[i]);
  kept.push_back(server.points.back());
  server.points = std::move(kept);
  server.spacing *= 2;
}

std::vector<TableSizeSeries> TableHistory::Series() const {
  std::vector<TableSizeSeries> out;
  out.reserve(servers_.size());
  for (const auto& [rank, server] : servers_) out.push_back(TableSizeSeries{rank, server.points});
  return out;
}

}  // namespace scheduler
}  // namespace pstrain
