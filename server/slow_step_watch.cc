#include "server/slow_step_watch.h"

#include <algorithm>

namespace pstrain::server {

std::optional<SlowStepReport> SlowStepWatch::Check(const std::optional<ParameterStore::PendingStep>& pending) {
  if (!pending.has_value() || pending->missing.empty()) return std::nullopt;
  const absl::Duration limit = std::max(kFloor, kFactor * pending->typical);
  if (pending->waited < limit) return std::nullopt;
  if (pending->step == reported_step_ && pending->missing == reported_missing_) return std::nullopt;
  reported_step_ = pending->step;
  reported_missing_ = pending->missing;
  SlowStepReport report;
  report.set_server_rank(server_rank_);
  report.set_step(pending->step);
  report.set_waited_ms(absl::ToInt64Milliseconds(pending->waited));
  report.set_typical_ms(absl::ToInt64Milliseconds(pending->typical));
  for (int rank : pending->missing) report.add_waiting_for(rank);
  return report;
}

}  // namespace pstrain::server
