// What the servers report about themselves beyond being alive: each one's embedding-table usage
// (the latest, and a bounded history for the dashboard), its traffic counters, and the newest slow
// SYNC steps. For the run summary, the dashboard and the log only: nothing here decides anything,
// and nothing is saved (a restarted scheduler has it again from the servers' next heartbeats and
// reports).
//
// Times in the summary and on the dashboard count from the job's start (`created`).
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_SERVER_REPORTS_H_
#define PSTRAIN_SCHEDULER_SERVER_REPORTS_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "proto/scheduler.pb.h"
#include "scheduler/status_json.h"
#include "scheduler/table_history.h"

namespace pstrain {
namespace scheduler {

class ServerReports {
 public:
  // The newest slow-step reports kept.
  static constexpr int kMaxSlowSteps = 50;

  explicit ServerReports(absl::Time created) : created_(created) {}

  // A live server's heartbeat (checked by the caller): its table usage when it lists tables, its
  // traffic counters when it carries them.
  void AddHeartbeat(const HeartbeatRequest& heartbeat, absl::Time now);
  // A slow-step report (checked by the caller) that arrived at `at`; the oldest of more than
  // kMaxSlowSteps is dropped.
  void AddSlowStep(const SlowStepReport& report, absl::Time at);

  // The run summary's members, each a line of JSON ending in ",\n":
  //   "slow_steps": [{"seconds", "server", "step", "waited_seconds", "waiting_for"}, ...]
  //   "servers": [{"rank", "bytes_received", "bytes_sent", "requests", "refused"}, ...]
  std::string SlowStepsJson() const;
  std::string ServersJson() const;
  // The summary's "embedding_tables" member over the servers in `live` (rows and bytes per table
  // per server, totals counting each (shard, table) once: its primary's, or its live copy's once
  // the primary is gone), or "" when no server reported tables.
  std::string TableUsageJson(const std::vector<int>& live) const;

  // The membership epoch server `rank`'s store served at its latest heartbeat; 0 when it said none
  // (or never heartbeated).
  int64_t StoreEpoch(int rank) const {
    auto it = store_epochs_.find(rank);
    return it == store_epochs_.end() ? 0 : it->second;
  }
  // Whether server `rank`'s latest heartbeat said no store of it serves yet
  // (HeartbeatRequest.restoring); false when it never heartbeated.
  bool Restoring(int rank) const { return restoring_.count(rank) > 0; }
  // The step server `rank`'s store was at in its latest heartbeat that said one
  // (HeartbeatRequest.step); 0 when none did.
  int64_t StoreStep(int rank) const {
    auto it = store_steps_.find(rank);
    return it == store_steps_.end() ? 0 : it->second;
  }

  // The dashboard's servers, slow steps and table history.
  void FillDashboard(DashboardStatus* out) const;

 private:
  const absl::Time created_;
  // By server rank, from its latest heartbeat.
  std::map<int, std::vector<TableUsage>> table_usage_;
  std::map<int, ServerTraffic> traffic_;
  std::map<int, int64_t> store_epochs_;
  std::map<int, int64_t> store_steps_;
  std::set<int> restoring_;
  // The table usage over the run, bounded.
  TableHistory table_history_;
  // The newest slow-step reports, with when each arrived.
  std::vector<std::pair<absl::Time, SlowStepReport>> slow_steps_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SERVER_REPORTS_H_
