// The scheduler's JSON API as text: what GET /api/status, /api/timeline and /api/targets answer
// (scheduler/dashboard_http.h serves them). Plain structs in, JSON text out; no gRPC, no locks.
//
// The Scheduler copies its state into these structs under its mutex (Scheduler::DashboardStatus,
// Progress::TimelineSince, Scheduler::MetricsTargets) and the HTTP handler formats them here,
// outside the mutex, so a slow client never holds up training.
//
// Numbers that are unknown or not finite (a test loss of an epoch nobody evaluated, a mean of
// nothing) are written as null, which every JSON parser reads. Times are seconds since the
// scheduler started ("now_seconds", "t", "seconds", "joined_seconds", "end_seconds") or ages in
// seconds ("..._seconds_ago").
#ifndef PSTRAIN_SCHEDULER_STATUS_JSON_H_
#define PSTRAIN_SCHEDULER_STATUS_JSON_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace pstrain {
namespace scheduler {

// An unknown number; written as null.
inline constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

// One complete epoch (test numbers unknown when it was not evaluated).
struct EpochStatus {
  int epoch = 0;
  double train_loss = kUnknown;
  double test_loss = kUnknown;
  double test_accuracy = kUnknown;
  std::optional<double> test_auc;   // only for jobs whose workers report scores
  std::optional<double> train_auc;  // progressive validation: only when workers score training
  int64_t samples = 0;
  double seconds = 0;
  double end_seconds = kUnknown;
};

// The scheduler itself, a server or a worker, live or gone.
struct MemberStatus {
  std::string role;  // "scheduler", "server", "worker"
  int rank = 0;
  std::string address;
  std::string metrics_address;                   // empty: serves no metrics
  std::string state;                             // "live", "dead", "left"
  double last_heartbeat_seconds_ago = kUnknown;  // unknown: never heartbeated
  double joined_seconds = 0;
};

// Sums over a worker's progress reports.
struct WorkerStatus {
  int rank = 0;
  int64_t samples = 0;
  double samples_per_second = 0;  // over the recent window (Progress::kRecentWindow)
  int64_t step = 0;               // the step of its latest report
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t compression_saved_bytes = 0;
  int64_t staleness_pulls = 0;
  double staleness_mean = kUnknown;  // unknown without pulls (SYNC)
  int64_t staleness_max = 0;
};

// A server's traffic counters, as its latest heartbeat had them.
struct ServerStatus {
  int rank = 0;
  int64_t bytes_received = 0;
  int64_t bytes_sent = 0;
  int64_t requests = 0;
  int64_t refused = 0;
};

struct MembershipEventStatus {
  double seconds = 0;
  std::string role;
  int rank = 0;
  std::string kind;  // "joined", "died", "left"
};

// A change of the server count (pstrain-ctl scale; scheduler/server_scaling.h): done, or the
// pending one (step -1, cut_over_seconds unknown).
struct ServerCountChangeStatus {
  int from = 0;
  int to = 0;
  int64_t step = -1;              // the cut the servers restored under the new map
  int64_t shard_map_version = 0;  // the new map's; 0 while pending
  double requested_seconds = 0;
  double cut_over_seconds = kUnknown;
  // What the servers of the new map reported of their re-cut (ReshardReport), so far: how many
  // reported, the longest pause, and the rows and bytes of their new shards, held and moved.
  int servers_reported = 0;
  int64_t max_pause_ms = 0;
  int64_t rows = 0;
  int64_t rows_moved = 0;
  int64_t bytes = 0;
  int64_t bytes_moved = 0;
};

// A server's slow SYNC step (Scheduler::ReportSlowStep).
struct SlowStepStatus {
  double seconds = 0;
  int server = 0;
  int64_t step = 0;
  double waited_seconds = 0;
  std::vector<int> waiting_for;
};

// A barrier participant that has not arrived.
struct MissingParticipant {
  std::string role;
  int rank = 0;
  std::string address;
  double last_heartbeat_seconds_ago = kUnknown;
};

// A barrier that has waited longer than expected (scheduler/stuck_barriers.h).
struct StuckBarrierStatus {
  std::string name;
  double since_seconds = 0;  // when it was first entered
  double waiting_seconds = 0;
  std::vector<MissingParticipant> missing;
  // The run summary keeps barriers that were stuck and then released (or cut by the end) too.
  bool released = false;
};

// A server's embedding tables at one time (scheduler/table_history.h): summed over its tables.
struct TableSizePoint {
  double seconds = 0;
  int64_t rows = 0;
  int64_t bytes = 0;
  int64_t evicted = 0;  // rows evicted so far
};

struct TableSizeSeries {
  int server = 0;
  std::vector<TableSizePoint> points;
};

// Progressive validation of records scored before they were trained on: a data stream's file, or
// its window of the newest files.
struct ProgressiveStatus {
  std::string file;     // the file's name; empty for the window
  bool closed = false;  // every record of the file is trained: its figures are final
  int64_t samples = 0;
  std::optional<double> auc;
  double logloss = kUnknown;
};

// A job on a data stream ("stream"): what is ready, how far training is behind it, and progressive
// validation by file (scheduler/stream_scores.h).
struct StreamStatus {
  std::string dir;
  int64_t files_ready = 0;
  int64_t records_ready = 0;
  bool ended = false;
  int64_t trained_records = 0;
  // Records ready and not trained yet, and the files they are in.
  int64_t lag_records = 0;
  int64_t lag_files = 0;
  int window_files = 0;
  ProgressiveStatus window;
  std::vector<ProgressiveStatus> files;  // oldest first
};

// The "stream" object of the run summary and of /api/status.
std::string StreamStatusJson(const StreamStatus& s);

// Everything GET /api/status shows.
struct DashboardStatus {
  std::string state;    // "WAITING", "RUNNING", "FINISHED", "FAILED"
  std::string failure;  // empty unless FAILED
  std::string mode;     // "sync", "async", "ssp"
  double now_seconds = 0;
  int epoch = 0;
  int epochs = 0;
  int64_t step = 0;
  int64_t total_steps = 0;
  double samples_per_second = 0;
  double eta_seconds = 0;
  double recent_loss = kUnknown;
  int64_t membership_epoch = 0;
  // The shard map's version (its shard-map epoch) and server count.
  int64_t shard_map_version = 0;
  int map_servers = 0;
  // The changes of the server count, oldest first, the pending one last.
  std::vector<ServerCountChangeStatus> server_count_changes;
  // Leases handed out and not complete / not reported yet ("leases_out").
  int64_t training_leases_out = 0;
  int64_t eval_leases_out = 0;
  // Barriers waiting for participants ("barriers_waiting"); the stuck ones are listed below.
  int barriers_waiting = 0;
  std::vector<EpochStatus> epochs_done;
  std::vector<MemberStatus> members;
  std::vector<WorkerStatus> workers;
  std::vector<ServerStatus> servers;
  std::vector<MembershipEventStatus> membership_events;
  std::vector<SlowStepStatus> slow_steps;
  std::vector<StuckBarrierStatus> stuck_barriers;
  // Per server, its embedding tables over time ("table_history": [{"server", "points": [[seconds,
  // rows, bytes, evicted], ...]}]); empty in a job without tables.
  std::vector<TableSizeSeries> table_history;
  // A job on a data stream, with at most the newest kDashboardStreamFiles files (the run summary
  // lists every one).
  std::optional<StreamStatus> stream;
};
inline constexpr size_t kDashboardStreamFiles = 72;

// One worker progress report, for the timeline. Per-step times are the report's step times
// divided by its steps (unknown without steps).
struct TimelinePoint {
  int64_t seq = 0;  // ascending from 0 over the scheduler's life
  double t = 0;     // seconds since the scheduler started
  int worker = 0;
  int epoch = 0;
  int64_t step = 0;
  double loss = kUnknown;  // the report's mean training loss
  int64_t samples = 0;
  int64_t steps = 0;
  double compute = kUnknown;
  double push = kUnknown;
  double wait = kUnknown;
  double pull = kUnknown;
  double staleness_mean = kUnknown;
  int64_t staleness_max = 0;
};

// One Prometheus scrape target: "host:port" and its labels (role, rank).
struct MetricsTarget {
  std::string address;
  std::vector<std::pair<std::string, std::string>> labels;
};

// {"state": .., "failure": .., "mode": .., "now_seconds": .., "epoch": .., "epochs": .., "step": ..,
//  "total_steps": .., "samples_per_second": .., "eta_seconds": .., "recent_loss": ..,
//  "membership_epoch": .., "leases_out": {"training": .., "evaluation": ..}, "barriers_waiting": ..,
//  "epochs_done": [..], "members": [..], "workers": [..], "servers": [..],
//  "membership_events": [..], "slow_steps": [..], "stuck_barriers": [..]}; see docs/DESIGN.md.
std::string StatusJson(const DashboardStatus& status);

// {"next": N, "points": [{"seq": .., "t": .., "worker": .., ...}, ...]}: the client asks again with
// since=N for the points after these.
std::string TimelineJson(const std::vector<TimelinePoint>& points, int64_t next);

// [{"targets": ["h:p"], "labels": {"role": "server", "rank": "0"}}, ...]: Prometheus' HTTP service
// discovery format.
std::string TargetsJson(const std::vector<MetricsTarget>& targets);

// {"error": "<message>"}.
std::string ErrorJson(absl::string_view message);

// The "stuck_barriers" list alone (also a member of the run summary).
std::string StuckBarriersJson(const std::vector<StuckBarrierStatus>& barriers);
// [{"from", "to", "step", "shard_map_version", "requested_seconds", "cut_over_seconds",
//   "servers_reported", "max_pause_ms", "rows", "rows_moved", "bytes", "bytes_moved"}, ...].
std::string ServerCountChangesJson(const std::vector<ServerCountChangeStatus>& changes);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_STATUS_JSON_H_
