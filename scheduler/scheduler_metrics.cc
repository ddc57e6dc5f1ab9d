#include "scheduler/scheduler_metrics.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {
namespace scheduler {
namespace {

constexpr const char* kStates[] = {"WAITING", "RUNNING", "FINISHED", "FAILED"};
constexpr const char* kRoles[] = {"server", "worker"};
constexpr const char* kKinds[] = {"joined", "died", "left"};

}  // namespace

// Shared with the registry's collector, which may outlive the SchedulerMetrics.
struct SchedulerMetrics::State {
  absl::Mutex mu;
  const Scheduler* scheduler ABSL_GUARDED_BY(mu) = nullptr;

  metrics::GaugeFamily* job_state = nullptr;
  metrics::Gauge* membership_epoch = nullptr;
  metrics::GaugeFamily* live_members = nullptr;
  metrics::CounterFamily* events = nullptr;
  metrics::Gauge* training_leases = nullptr;
  metrics::Gauge* eval_leases = nullptr;
  metrics::Gauge* epoch = nullptr;
  metrics::Gauge* step = nullptr;
  metrics::Gauge* total_steps = nullptr;
  metrics::Gauge* epoch_progress = nullptr;
  metrics::GaugeFamily* train_loss = nullptr;
  metrics::GaugeFamily* test_loss = nullptr;
  metrics::GaugeFamily* progressive_auc = nullptr;
  metrics::GaugeFamily* test_accuracy = nullptr;
  metrics::Gauge* shard_map_version = nullptr;
  metrics::Gauge* map_servers = nullptr;
  metrics::Counter* server_count_changes = nullptr;
  metrics::Counter* rows_moved = nullptr;
  metrics::Counter* bytes_moved = nullptr;
  metrics::Gauge* last_change_pause = nullptr;
  metrics::Gauge* samples_per_second = nullptr;
  metrics::Gauge* eta_seconds = nullptr;
  metrics::Gauge* barriers_waiting = nullptr;
  metrics::Gauge* barriers_stuck = nullptr;
  metrics::GaugeFamily* stream_records = nullptr;
  metrics::GaugeFamily* stream_lag_records = nullptr;
  metrics::GaugeFamily* stream_lag_files = nullptr;
  metrics::GaugeFamily* stream_files_ready = nullptr;
  metrics::GaugeFamily* stream_auc = nullptr;
  metrics::GaugeFamily* stream_logloss = nullptr;

  // A job on a data stream: the stream's series (absent otherwise).
  void SetStream(const StreamStatus& s);

  void Set(const DashboardStatus& s);
  // Reads the attached scheduler, if any.
  void Collect() {
    absl::MutexLock lock(&mu);
    if (scheduler != nullptr) Set(scheduler->DashboardStatus());
  }
};

void SchedulerMetrics::State::Set(const DashboardStatus& s) {
  for (const char* state : kStates) job_state->With({state})->Set(s.state == state ? 1 : 0);
  membership_epoch->Set(static_cast<double>(s.membership_epoch));
  shard_map_version->Set(static_cast<double>(s.shard_map_version));
  map_servers->Set(s.map_servers);
  server_count_changes->RaiseTo(
      static_cast<double>(std::count_if(s.server_count_changes.begin(), s.server_count_changes.end(),
                                        [](const ServerCountChangeStatus& c) { return c.step >= 0; })));
  int64_t rows = 0, bytes = 0, pause_ms = 0;
  for (const ServerCountChangeStatus& c : s.server_count_changes) {
    rows += c.rows_moved;
    bytes += c.bytes_moved;
    if (c.step >= 0) pause_ms = c.max_pause_ms;
  }
  rows_moved->RaiseTo(static_cast<double>(rows));
  bytes_moved->RaiseTo(static_cast<double>(bytes));
  last_change_pause->Set(static_cast<double>(pause_ms) / 1e3);
  for (const char* role : kRoles) {
    live_members->With({role})->Set(
        static_cast<double>(std::count_if(s.members.begin(), s.members.end(), [role](const MemberStatus& m) {
          return m.role == role && m.state == "live";
        })));
  }
  for (const char* kind : kKinds) {
    const double n =
        static_cast<double>(std::count_if(s.membership_events.begin(), s.membership_events.end(),
                                          [kind](const MembershipEventStatus& e) { return e.kind == kind; }));
    // The events are kept whole: the counter follows their count.
    events->With({kind})->RaiseTo(n);
  }
  training_leases->Set(static_cast<double>(s.training_leases_out));
  eval_leases->Set(static_cast<double>(s.eval_leases_out));
  epoch->Set(s.epoch);
  step->Set(static_cast<double>(s.step));
  total_steps->Set(static_cast<double>(s.total_steps));
  double ratio = 0;
  if (s.total_steps > 0 && s.epochs > 0) {
    const double steps_per_epoch = static_cast<double>(s.total_steps) / s.epochs;
    ratio = std::clamp(static_cast<double>(s.step) / steps_per_epoch - s.epoch, 0.0, 1.0);
  }
  epoch_progress->Set(ratio);
  if (std::isfinite(s.recent_loss)) train_loss->Get()->Set(s.recent_loss);
  for (auto it = s.epochs_done.rbegin(); it != s.epochs_done.rend(); ++it) {
    if (!it->train_auc.has_value() || !std::isfinite(*it->train_auc)) continue;
    progressive_auc->Get()->Set(*it->train_auc);
    break;
  }
  for (auto it = s.epochs_done.rbegin(); it != s.epochs_done.rend(); ++it) {
    if (!std::isfinite(it->test_loss)) continue;
    test_loss->Get()->Set(it->test_loss);
    if (std::isfinite(it->test_accuracy)) test_accuracy->Get()->Set(it->test_accuracy);
    break;
  }
  samples_per_second->Set(s.samples_per_second);
  eta_seconds->Set(s.eta_seconds);
  barriers_waiting->Set(s.barriers_waiting);
  barriers_stuck->Set(static_cast<double>(s.stuck_barriers.size()));
  if (s.stream.has_value()) SetStream(*s.stream);
}

void SchedulerMetrics::State::SetStream(const StreamStatus& s) {
  stream_records->With({"ready"})->Set(static_cast<double>(s.records_ready));
  stream_records->With({"trained"})->Set(static_cast<double>(s.trained_records));
  stream_lag_records->Get()->Set(static_cast<double>(s.lag_records));
  stream_lag_files->Get()->Set(static_cast<double>(s.lag_files));
  stream_files_ready->Get()->Set(static_cast<double>(s.files_ready));
  auto set = [this](const char* over, const ProgressiveStatus& p) {
    if (p.auc.has_value() && std::isfinite(*p.auc)) stream_auc->With({over})->Set(*p.auc);
    if (std::isfinite(p.logloss)) stream_logloss->With({over})->Set(p.logloss);
  };
  set("window", s.window);
  for (auto it = s.files.rbegin(); it != s.files.rend(); ++it) {
    if (!it->closed) continue;
    set("last_file", *it);
    break;
  }
}

SchedulerMetrics::SchedulerMetrics(metrics::Registry* registry) : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.job_state = &registry->AddGauge("pstrain_scheduler_job_state", "1 for the job's current state", {"state"});
  s.membership_epoch =
      registry->AddGauge("pstrain_scheduler_membership_epoch", "Bumped by every change of the live set").Get();
  s.shard_map_version = registry
                            ->AddGauge("pstrain_scheduler_shard_map_version",
                                       "The shard map's version: bumped by every change of the server count")
                            .Get();
  s.map_servers = registry->AddGauge("pstrain_scheduler_map_servers", "Servers in the shard map").Get();
  s.server_count_changes = registry
                               ->AddCounter("pstrain_scheduler_server_count_changes_total",
                                            "Changes of the server count cut over (pstrain-ctl scale)")
                               .Get();
  s.rows_moved = registry
                     ->AddCounter("pstrain_scheduler_rows_moved_total",
                                  "Embedding rows whose server a change of the server count changed")
                     .Get();
  s.bytes_moved = registry
                      ->AddCounter("pstrain_scheduler_bytes_moved_total",
                                   "Bytes (values with optimizer state, rows) whose server a change of the server "
                                   "count changed")
                      .Get();
  s.last_change_pause = registry
                            ->AddGauge("pstrain_scheduler_last_change_pause_seconds",
                                       "The longest a server served nothing for the newest change of the server count")
                            .Get();
  // Not "role": every series already has the constant label role="scheduler".
  s.live_members = &registry->AddGauge("pstrain_scheduler_live_members", "Live members by role", {"member_role"});
  s.events = &registry->AddCounter("pstrain_scheduler_membership_events_total",
                                   "Members that joined the running job, died or left", {"kind"});
  metrics::GaugeFamily& leases =
      registry->AddGauge("pstrain_scheduler_leases_outstanding", "Leases handed out and not complete yet", {"kind"});
  s.training_leases = leases.With({"training"});
  s.eval_leases = leases.With({"evaluation"});
  s.epoch = registry->AddGauge("pstrain_scheduler_epoch", "The newest epoch workers report").Get();
  s.step = registry->AddGauge("pstrain_scheduler_step", "Optimizer steps done (SYNC: global steps)").Get();
  s.total_steps = registry->AddGauge("pstrain_scheduler_total_steps", "Optimizer steps the job makes").Get();
  s.epoch_progress = registry
                         ->AddGauge("pstrain_scheduler_epoch_progress_ratio",
                                    "How far the current epoch is, 0..1, estimated from the steps")
                         .Get();
  s.train_loss = &registry->AddGauge("pstrain_scheduler_train_loss", "Mean training loss of the latest reports");
  s.test_loss = &registry->AddGauge("pstrain_scheduler_test_loss", "Test loss of the last evaluated complete epoch");
  s.progressive_auc = &registry->AddGauge(
      "pstrain_scheduler_progressive_auc",
      "AUC of the last complete epoch's trained records, each predicted before the update it led to (CTR)");
  s.test_accuracy =
      &registry->AddGauge("pstrain_scheduler_test_accuracy", "Test accuracy of the last evaluated complete epoch");
  s.samples_per_second =
      registry->AddGauge("pstrain_scheduler_samples_per_second", "Training samples per second over the run").Get();
  s.eta_seconds = registry->AddGauge("pstrain_scheduler_eta_seconds", "Estimated seconds until the last step").Get();
  s.barriers_waiting =
      registry->AddGauge("pstrain_scheduler_barriers_waiting", "Barriers waiting for participants").Get();
  s.stream_records = &registry->AddGauge("pstrain_scheduler_stream_records",
                                         "A data stream's records ready (in files taken in) and trained", {"kind"});
  s.stream_lag_records =
      &registry->AddGauge("pstrain_scheduler_stream_lag_records", "A data stream's records ready and not trained yet");
  s.stream_lag_files = &registry->AddGauge("pstrain_scheduler_stream_lag_files",
                                           "A data stream's files holding records not trained yet");
  s.stream_files_ready =
      &registry->AddGauge("pstrain_scheduler_stream_files_ready", "A data stream's files taken in (marked ready)");
  s.stream_auc = &registry->AddGauge(
      "pstrain_scheduler_stream_progressive_auc",
      "A data stream's progressive AUC (records predicted before the update they led to), over the window of the "
      "newest files or of the newest wholly trained file",
      {"over"});
  s.stream_logloss =
      &registry->AddGauge("pstrain_scheduler_stream_progressive_logloss", "The same, mean log loss", {"over"});
  s.barriers_stuck = registry
                         ->AddGauge("pstrain_scheduler_barriers_stuck",
                                    "Barriers waiting longer than expected (the log names who is missing)")
                         .Get();
  registry->AddCollector([state = state_] { state->Collect(); });
}

SchedulerMetrics::~SchedulerMetrics() { Detach(); }

void SchedulerMetrics::Attach(const Scheduler* scheduler) {
  absl::MutexLock lock(&state_->mu);
  state_->scheduler = scheduler;
}

void SchedulerMetrics::Detach() {
  state_->Collect();
  absl::MutexLock lock(&state_->mu);
  state_->scheduler = nullptr;
}

void SchedulerMetrics::Update(const DashboardStatus& status) {
  absl::MutexLock lock(&state_->mu);
  state_->Set(status);
}

}  // namespace scheduler
}  // namespace pstrain
