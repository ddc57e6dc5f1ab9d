#include "scheduler/status_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/json.h"

namespace pstrain {
namespace scheduler {
namespace {

// `items` formatted by `one` as a JSON array.
template <typename T, typename F>
std::string Array(const std::vector<T>& items, F one) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) absl::StrAppend(&out, i == 0 ? "" : ",", one(items[i]));
  out += "]";
  return out;
}

std::string Epoch(const EpochStatus& e) {
  return absl::StrCat("{\"epoch\":", e.epoch, ",\"train_loss\":", JsonNumber(e.train_loss),
                      ",\"test_loss\":", JsonNumber(e.test_loss), ",\"test_accuracy\":", JsonNumber(e.test_accuracy),
                      e.test_auc.has_value() ? absl::StrCat(",\"test_auc\":", JsonNumber(*e.test_auc)) : "",
                      e.train_auc.has_value() ? absl::StrCat(",\"train_auc\":", JsonNumber(*e.train_auc)) : "",
                      ",\"samples\":", e.samples, ",\"seconds\":", JsonNumber(e.seconds),
                      ",\"end_seconds\":", JsonNumber(e.end_seconds), "}");
}

std::string Member(const MemberStatus& m) {
  return absl::StrCat("{\"role\":", JsonString(m.role), ",\"rank\":", m.rank, ",\"address\":", JsonString(m.address),
                      ",\"metrics_address\":", JsonString(m.metrics_address), ",\"state\":", JsonString(m.state),
                      ",\"last_heartbeat_seconds_ago\":", JsonNumber(m.last_heartbeat_seconds_ago),
                      ",\"joined_seconds\":", JsonNumber(m.joined_seconds), "}");
}

std::string Worker(const WorkerStatus& w) {
  return absl::StrCat(
      "{\"rank\":", w.rank, ",\"samples\":", w.samples, ",\"samples_per_second\":", JsonNumber(w.samples_per_second),
      ",\"step\":", w.step, ",\"bytes_sent\":", w.bytes_sent, ",\"bytes_received\":", w.bytes_received,
      ",\"compression_saved_bytes\":", w.compression_saved_bytes, ",\"staleness_pulls\":", w.staleness_pulls,
      ",\"staleness_mean\":", JsonNumber(w.staleness_mean), ",\"staleness_max\":", w.staleness_max, "}");
}

std::string Server(const ServerStatus& s) {
  return absl::StrCat("{\"rank\":", s.rank, ",\"bytes_received\":", s.bytes_received, ",\"bytes_sent\":", s.bytes_sent,
                      ",\"requests\":", s.requests, ",\"refused\":", s.refused, "}");
}

std::string Event(const MembershipEventStatus& e) {
  return absl::StrCat("{\"seconds\":", JsonNumber(e.seconds), ",\"role\":", JsonString(e.role), ",\"rank\":", e.rank,
                      ",\"kind\":", JsonString(e.kind), "}");
}

std::string CountChange(const ServerCountChangeStatus& c) {
  return absl::StrCat(
      "{\"from\":", c.from, ",\"to\":", c.to, ",\"step\":", c.step, ",\"shard_map_version\":", c.shard_map_version,
      ",\"requested_seconds\":", JsonNumber(c.requested_seconds),
      ",\"cut_over_seconds\":", JsonNumber(c.cut_over_seconds), ",\"servers_reported\":", c.servers_reported,
      ",\"max_pause_ms\":", c.max_pause_ms, ",\"rows\":", c.rows, ",\"rows_moved\":", c.rows_moved,
      ",\"bytes\":", c.bytes, ",\"bytes_moved\":", c.bytes_moved, "}");
}

std::string SlowStep(const SlowStepStatus& s) {
  return absl::StrCat("{\"seconds\":", JsonNumber(s.seconds), ",\"server\":", s.server, ",\"step\":", s.step,
                      ",\"waited_seconds\":", JsonNumber(s.waited_seconds), ",\"waiting_for\":[",
                      absl::StrJoin(s.waiting_for, ","), "]}");
}

std::string Missing(const MissingParticipant& m) {
  return absl::StrCat("{\"role\":", JsonString(m.role), ",\"rank\":", m.rank, ",\"address\":", JsonString(m.address),
                      ",\"last_heartbeat_seconds_ago\":", JsonNumber(m.last_heartbeat_seconds_ago), "}");
}

std::string Stuck(const StuckBarrierStatus& b) {
  return absl::StrCat("{\"name\":", JsonString(b.name), ",\"since_seconds\":", JsonNumber(b.since_seconds),
                      ",\"waiting_seconds\":", JsonNumber(b.waiting_seconds),
                      ",\"released\":", b.released ? "true" : "false", ",\"missing\":", Array(b.missing, Missing), "}");
}

std::string TableSeries(const TableSizeSeries& s) {
  return absl::StrCat("{\"server\":", s.server, ",\"points\":",
                      Array(s.points,
                            [](const TableSizePoint& p) {
                              return absl::StrCat("[", JsonNumber(p.seconds), ",", p.rows, ",", p.bytes, ",", p.evicted,
                                                  "]");
                            }),
                      "}");
}

std::string Point(const TimelinePoint& p) {
  return absl::StrCat("{\"seq\":", p.seq, ",\"t\":", JsonNumber(p.t), ",\"worker\":", p.worker, ",\"epoch\":", p.epoch,
                      ",\"step\":", p.step, ",\"loss\":", JsonNumber(p.loss), ",\"samples\":", p.samples,
                      ",\"steps\":", p.steps, ",\"compute\":", JsonNumber(p.compute), ",\"push\":", JsonNumber(p.push),
                      ",\"wait\":", JsonNumber(p.wait), ",\"pull\":", JsonNumber(p.pull),
                      ",\"staleness_mean\":", JsonNumber(p.staleness_mean), ",\"staleness_max\":", p.staleness_max,
                      "}");
}

std::string Target(const MetricsTarget& t) {
  std::string labels = "{";
  for (size_t i = 0; i < t.labels.size(); ++i) {
    absl::StrAppend(&labels, i == 0 ? "" : ",", JsonString(t.labels[i].first), ":", JsonString(t.labels[i].second));
  }
  labels += "}";
  return absl::StrCat("{\"targets\":[", JsonString(t.address), "],\"labels\":", labels, "}");
}

std::string Progressive(const ProgressiveStatus& p) {
  return absl::StrCat(
      "{",
      p.file.empty() ? ""
                     : absl::StrCat("\"file\":", JsonString(p.file), ",\"closed\":", p.closed ? "true" : "false", ","),
      "\"samples\":", p.samples, ",\"auc\":", p.auc.has_value() ? JsonNumber(*p.auc) : "null",
      ",\"logloss\":", JsonNumber(p.logloss), "}");
}

}  // namespace

std::string StreamStatusJson(const StreamStatus& s) {
  return absl::StrCat("{\"dir\":", JsonString(s.dir), ",\"files_ready\":", s.files_ready,
                      ",\"records_ready\":", s.records_ready, ",\"ended\":", s.ended ? "true" : "false",
                      ",\"trained_records\":", s.trained_records, ",\"lag_records\":", s.lag_records,
                      ",\"lag_files\":", s.lag_files, ",\"window_files\":", s.window_files,
                      ",\"window\":", Progressive(s.window), ",\"progressive\":", Array(s.files, Progressive), "}");
}

std::string StatusJson(const DashboardStatus& s) {
  return absl::StrCat(
      "{\"state\":", JsonString(s.state), ",\"failure\":", JsonString(s.failure), ",\"mode\":", JsonString(s.mode),
      ",\"now_seconds\":", JsonNumber(s.now_seconds), ",\"epoch\":", s.epoch, ",\"epochs\":", s.epochs,
      ",\"step\":", s.step, ",\"total_steps\":", s.total_steps,
      ",\"samples_per_second\":", JsonNumber(s.samples_per_second), ",\"eta_seconds\":", JsonNumber(s.eta_seconds),
      ",\"recent_loss\":", JsonNumber(s.recent_loss), ",\"membership_epoch\":", s.membership_epoch,
      ",\"shard_map_version\":", s.shard_map_version, ",\"map_servers\":", s.map_servers,
      ",\"server_count_changes\":", Array(s.server_count_changes, CountChange),
      ",\"leases_out\":{\"training\":", s.training_leases_out, ",\"evaluation\":", s.eval_leases_out,
      "},\"barriers_waiting\":", s.barriers_waiting, ",\"epochs_done\":", Array(s.epochs_done, Epoch),
      ",\"members\":", Array(s.members, Member), ",\"workers\":", Array(s.workers, Worker),
      ",\"servers\":", Array(s.servers, Server), ",\"membership_events\":", Array(s.membership_events, Event),
      ",\"slow_steps\":", Array(s.slow_steps, SlowStep), ",\"stuck_barriers\":", StuckBarriersJson(s.stuck_barriers),
      ",\"table_history\":", Array(s.table_history, TableSeries),
      s.stream.has_value() ? absl::StrCat(",\"stream\":", StreamStatusJson(*s.stream)) : "", "}");
}

std::string TimelineJson(const std::vector<TimelinePoint>& points, int64_t next) {
  return absl::StrCat("{\"next\":", next, ",\"points\":", Array(points, Point), "}");
}

std::string TargetsJson(const std::vector<MetricsTarget>& targets) { return Array(targets, Target); }

std::string ErrorJson(absl::string_view message) { return absl::StrCat("{\"error\":", JsonString(message), "}"); }

std::string ServerCountChangesJson(const std::vector<ServerCountChangeStatus>& changes) {
  return Array(changes, CountChange);
}

std::string StuckBarriersJson(const std::vector<StuckBarrierStatus>& barriers) { return Array(barriers, Stuck); }

}  // namespace scheduler
}  // namespace pstrain
