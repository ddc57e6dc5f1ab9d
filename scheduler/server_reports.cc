#include "scheduler/server_reports.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/json.h"

namespace pstrain {
namespace scheduler {

void ServerReports::AddHeartbeat(const HeartbeatRequest& heartbeat, absl::Time now) {
  if (heartbeat.tables_size() > 0) {
    table_usage_[heartbeat.rank()].assign(heartbeat.tables().begin(), heartbeat.tables().end());
    table_history_.Add(heartbeat.rank(), absl::ToDoubleSeconds(now - created_), heartbeat.tables());
  }
  if (heartbeat.has_traffic()) traffic_[heartbeat.rank()] = heartbeat.traffic();
  if (heartbeat.store_epoch() > 0) store_epochs_[heartbeat.rank()] = heartbeat.store_epoch();
  if (heartbeat.has_step()) store_steps_[heartbeat.rank()] = heartbeat.step();
  if (heartbeat.restoring()) {
    restoring_.insert(heartbeat.rank());
  } else {
    restoring_.erase(heartbeat.rank());
  }
}

void ServerReports::AddSlowStep(const SlowStepReport& report, absl::Time at) {
  slow_steps_.emplace_back(at, report);
  if (slow_steps_.size() > kMaxSlowSteps) slow_steps_.erase(slow_steps_.begin());
}

std::string ServerReports::SlowStepsJson() const {
  std::string out = "  \"slow_steps\": [";
  for (size_t i = 0; i < slow_steps_.size(); ++i) {
    const auto& [at, report] = slow_steps_[i];
    absl::StrAppend(&out, i == 0 ? "" : ", ", "{\"seconds\": ", JsonNumber(absl::ToDoubleSeconds(at - created_)),
                    ", \"server\": ", report.server_rank(), ", \"step\": ", report.step(),
                    ", \"waited_seconds\": ", JsonNumber(report.waited_ms() / 1e3), ", \"waiting_for\": [",
                    absl::StrJoin(report.waiting_for(), ", "), "]}");
  }
  return out + "],\n";
}

std::string ServerReports::ServersJson() const {
  std::string out = "  \"servers\": [";
  for (const auto& [rank, t] : traffic_) {
    absl::StrAppend(&out, out.back() == '[' ? "" : ", ", "{\"rank\": ", rank,
                    ", \"bytes_received\": ", t.bytes_received(), ", \"bytes_sent\": ", t.bytes_sent(),
                    ", \"requests\": ", t.requests(), ", \"refused\": ", t.refused(), "}");
  }
  return out + "],\n";
}

std::string ServerReports::TableUsageJson(const std::vector<int>& live) const {
  if (table_usage_.empty()) return "";
  std::map<std::pair<int, std::string>, const TableUsage*> by_shard;
  std::string stores;
  for (const auto& [server, usages] : table_usage_) {
    if (std::find(live.begin(), live.end(), server) == live.end()) continue;
    for (const TableUsage& u : usages) {
      absl::StrAppend(&stores, stores.empty() ? "" : ",\n", "      {\"server\": ", server, ", \"shard\": ", u.shard(),
                      ", \"replica\": ", u.replica() ? "true" : "false", ", \"table\": \"", u.table(),
                      "\", \"rows\": ", u.rows(), ", \"bytes\": ", u.bytes(), ", \"admitted\": ", u.admitted(),
                      ", \"refused\": ", u.refused(), ", \"evicted\": ", u.evicted(),
                      ", \"tombstones\": ", u.tombstones(), "}");
      const TableUsage*& slot = by_shard[{u.shard(), u.table()}];
      if (slot == nullptr || (slot->replica() && !u.replica())) slot = &u;
    }
  }
  int64_t rows = 0, bytes = 0, floor = 0, admitted = 0, refused = 0, evicted = 0, tombstones = 0;
  for (const auto& [key, u] : by_shard) {
    rows += u->rows();
    bytes += u->bytes();
    floor += u->floor_bytes();
    admitted += u->admitted();
    refused += u->refused();
    evicted += u->evicted();
    tombstones += u->tombstones();
  }
  return absl::StrCat("  \"embedding_tables\": {\"rows\": ", rows, ", \"bytes\": ", bytes, ", \"admitted\": ", admitted,
                      ", \"refused\": ", refused, ", \"evicted\": ", evicted, ", \"tombstones\": ", tombstones,
                      ", \"bytes_per_row\": ", JsonNumber(rows > 0 ? static_cast<double>(bytes) / rows : 0),
                      ", \"floor_bytes_per_row\": ", JsonNumber(rows > 0 ? static_cast<double>(floor) / rows : 0),
                      ", \"stores\": [\n", stores, "\n    ]},\n");
}

void ServerReports::FillDashboard(DashboardStatus* out) const {
  for (const auto& [rank, t] : traffic_) {
    out->servers.push_back(ServerStatus{rank, t.bytes_received(), t.bytes_sent(), t.requests(), t.refused()});
  }
  for (const auto& [at, report] : slow_steps_) {
    out->slow_steps.push_back(SlowStepStatus{absl::ToDoubleSeconds(at - created_),
                                             report.server_rank(),
                                             report.step(),
                                             report.waited_ms() / 1e3,
                                             {report.waiting_for().begin(), report.waiting_for().end()}});
  }
  out->table_history = table_history_.Series();
}

}  // namespace scheduler
}  // namespace pstrain
