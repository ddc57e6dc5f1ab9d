#include "scheduler/progress.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/step_times.h"
#include "data/assignment.h"
#include "data/score_histogram_proto.h"
#include "google/protobuf/util/json_util.h"
#include "scheduler/json.h"

namespace pstrain {
namespace scheduler {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double Ratio(double num, double den) { return den > 0 ? num / den : kNaN; }

std::string JobSpecJson(const JobSpec& job) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(job, &json, options).ok()) return "null";
  return json;
}

EvalPool::Options EvalOptions(const Progress::Options& o) {
  EvalPool::Options e;
  e.test_samples = o.test_samples;
  e.num_workers = o.job.num_workers();
  e.epochs = o.job.epochs();
  return e;
}

// The timeline's point for `report`, received `t` seconds after the scheduler started.
TimelinePoint TimelinePointOf(const ProgressReport& report, double t) {
  TimelinePoint p;
  p.t = t;
  p.worker = report.worker_rank();
  p.epoch = report.epoch();
  p.step = report.step();
  p.loss = Ratio(report.train().loss_sum(), static_cast<double>(report.train().samples()));
  p.samples = report.train().samples();
  const StepTimes& times = report.step_times();
  p.steps = times.steps();
  const double steps = static_cast<double>(times.steps());
  p.compute = Ratio(times.compute_seconds(), steps);
  p.push = Ratio(times.push_seconds(), steps);
  p.wait = Ratio(times.wait_seconds(), steps);
  p.pull = Ratio(times.pull_seconds(), steps);
  p.staleness_mean =
      Ratio(static_cast<double>(report.staleness().sum()), static_cast<double>(report.staleness().pulls()));
  p.staleness_max = report.staleness().max();
  return p;
}

// Adds `add` to `sum`: a report's traffic or staleness to its worker's, or a worker's to the
// forgotten workers' (Progress::ForgetWorkers). Staleness max is the maximum.
void AddTraffic(const WorkerTraffic& add, WorkerTraffic* sum) {
  sum->set_bytes_sent(sum->bytes_sent() + add.bytes_sent());
  sum->set_bytes_received(sum->bytes_received() + add.bytes_received());
  sum->set_compression_saved_bytes(sum->compression_saved_bytes() + add.compression_saved_bytes());
}

void AddStaleness(const Staleness& add, Staleness* sum) {
  sum->set_pulls(sum->pulls() + add.pulls());
  sum->set_sum(sum->sum() + add.sum());
  sum->set_max(std::max(sum->max(), add.max()));
}

}  // namespace

Progress::Progress(Options options)
    : options_(std::move(options)), last_epoch_end_(options_.created), eval_(EvalOptions(options_)) {
  for (int rank = 0; rank < job().num_workers(); ++rank) workers_[rank];
}

void Progress::Start(absl::Time now) {
  if (start_.has_value()) return;
  start_ = now;
  last_epoch_end_ = now;
}

void Progress::Complete(Epoch* epoch, absl::Time now) {
  epoch->complete = true;
  if (epoch->train_scores != nullptr) {
    epoch->train_auc = TrainAuc(*epoch);
    epoch->train_scores.reset();
  }
  epoch->seconds = absl::ToDoubleSeconds(now - last_epoch_end_);
  epoch->end = now;
  last_epoch_end_ = now;
}

double Progress::TrainAuc(const Epoch& epoch) {
  if (epoch.train_scores == nullptr) return kNaN;
  const absl::StatusOr<double> auc = epoch.train_scores->Auc();
  return auc.ok() ? *auc : kNaN;
}

void Progress::GrowData(int64_t train_samples, int64_t total_steps) {
  CHECK_GE(train_samples, options_.train_samples);
  CHECK_GE(total_steps, options_.total_steps);
  options_.train_samples = train_samples;
  options_.total_steps = total_steps;
}

void Progress::UpdateCompletion(int epoch, absl::Time now) {
  Epoch& data = epochs_[epoch];
  if (!data.complete && eval_.complete(epoch)) Complete(&data, now);
}

void Progress::CloseUnevaluatedBefore(int epoch, absl::Time now) {
  for (auto& [e, data] : epochs_) {
    if (e >= epoch) break;
    if (!data.complete && !eval_.opened(e)) Complete(&data, now);
  }
}

absl::Status Progress::CheckClaims(const ProgressReport& report, int64_t batch_budget) const {
  const int rank = report.worker_rank();
  const TrainStats& train = report.train();
  const std::string where = absl::StrCat("progress report from worker ", rank, " for epoch ", report.epoch());
  const bool sync = job().mode() == SYNC;
  const int64_t per_step = sync ? options_.global_batch : job().batch_size();
  // Written to not overflow: steps and samples are the sender's (Add checked them >= 0).
  if (per_step > 0 && train.samples() / per_step + (train.samples() % per_step != 0) > train.steps()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", train.samples(), " samples in ", train.steps(),
                                                   sync ? " steps" : " batches", ", expected at most ", per_step,
                                                   sync ? " (the global batch) each" : " (the batch size) each"));
  }
  auto it = workers_.find(rank);
  const int64_t samples_before = it == workers_.end() ? 0 : it->second.samples;
  const int64_t batches_before = it == workers_.end() ? 0 : it->second.batches;
  if (counts_steps()) {
    const int64_t limit = options_.total_steps * options_.global_batch * (1 + redo_rounds_);
    if (train.samples() > limit - samples_before) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", samples_before + train.samples(), " samples over the job, more than the job's ",
                       options_.total_steps, " steps of ", options_.global_batch, " samples",
                       redo_rounds_ > 0 ? " (and its redone steps)" : "", " hold"));
    }
  }
  if (!sync && batch_budget >= 0 && train.steps() > batch_budget - batches_before) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", batches_before + train.steps(),
                                                   " batches over the job, more than the ", batch_budget,
                                                   " batches of the leases handed to it"));
  }
  return absl::OkStatus();
}

absl::Status Progress::Add(const ProgressReport& report, absl::Time now, int64_t batch_budget) {
  const int rank = report.worker_rank();
  if (rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("progress report: worker rank ", rank, ", expected >= 0"));
  }
  if (report.epoch() < 0 || report.epoch() >= job().epochs()) {
    return absl::InvalidArgumentError(absl::StrCat("progress report from worker ", rank, ": epoch ", report.epoch(),
                                                   " is outside [0, ", job().epochs(), ")"));
  }
  const TrainStats& train = report.train();
  if (train.samples() < 0 || train.steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("progress report from worker ", rank, " for epoch ", report.epoch(),
                                                   ": negative counts (train samples ", train.samples(), ", steps ",
                                                   train.steps(), ")"));
  }
  // SYNC steps count from reports: a step the job never has would add samples to no epoch of it.
  if (counts_steps() && report.step() > options_.total_steps) {
    return absl::InvalidArgumentError(absl::StrCat("progress report from worker ", rank, ": step ", report.step(),
                                                   " is past the job's ", options_.total_steps, " steps"));
  }
  // A rollback to a checkpoint (AllowRedo) makes the workers redo steps they had not reported yet.
  const int64_t most_steps = report.step() + redo_rounds_ * options_.total_steps;
  if (counts_steps() && train.steps() > most_steps) {
    return absl::InvalidArgumentError(absl::StrCat("progress report from worker ", rank, ": ", train.steps(),
                                                   " steps done by step ", report.step(), ", expected at most ",
                                                   most_steps, redo_rounds_ > 0 ? " (with its redone steps)" : ""));
  }
  if (absl::Status s = CheckClaims(report, batch_budget); !s.ok()) return s;
  if (train.has_scores()) {
    const std::string where = absl::StrCat("progress report from worker ", rank, ": training scores");
    absl::StatusOr<int64_t> predictions = data::CheckScoreHistogramProto(train.scores());
    if (!predictions.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", predictions.status().message()));
    if (*predictions > train.samples()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", *predictions, " predictions for ", train.samples(),
                                                     " samples, expected at most one a sample"));
    }
  }
  if (absl::Status s = eval_.Check(report); !s.ok()) return s;
  if (absl::Status s = CheckStepTimes(report.step_times(), absl::StrCat("progress report from worker ", rank));
      !s.ok()) {
    return s;
  }
  Start(now);
  CloseUnevaluatedBefore(report.epoch(), now);

  Epoch& epoch = epochs_[report.epoch()];
  if (train.has_scores() && !epoch.train_auc.has_value()) {  // a late report of a complete epoch adds none
    if (epoch.train_scores == nullptr) epoch.train_scores = std::make_shared<data::ScoreHistogram>();
    // Checked above: adds every bin.
    (void)data::MergeScoreHistogramProto(train.scores(), epoch.train_scores.get());
  }
  epoch.train_loss_sum += train.loss_sum();
  epoch.train_samples += train.samples();
  AddStepTimes(report.step_times(), &epoch.step_times);
  if (counts_steps()) CountSteps(report.step() - train.steps(), report.step());
  Worker& worker = workers_[rank];
  worker.samples += train.samples();
  worker.batches += train.steps();
  if (worker.step != report.step()) worker.step_changed = now;
  worker.step = report.step();
  AddTraffic(report.traffic(), &worker.traffic);
  AddStaleness(report.staleness(), &worker.staleness);
  if (train.samples() > 0) worker.recent.emplace_back(now, train.samples());
  while (!worker.recent.empty() && worker.recent.front().first < now - kRecentWindow) worker.recent.pop_front();
  // Only training goes on the charts: evaluation results and the final done report would be
  // points without a loss or step times.
  if (train.steps() > 0 || train.samples() > 0 || report.step_times().steps() > 0) {
    timeline_.Add(TimelinePointOf(report, absl::ToDoubleSeconds(now - options_.created)));
  }
  max_epoch_ = std::max(max_epoch_, report.epoch());
  max_step_ = std::max(max_step_, report.step());
  batches_ += train.steps();
  if (train.samples() > 0) {
    recent_.emplace_back(train.loss_sum(), train.samples());
    const size_t window = std::max<size_t>(4, 2 * static_cast<size_t>(job().num_workers()));
    while (recent_.size() > window) recent_.pop_front();
  }
  for (int e : eval_.Record(report, now)) UpdateCompletion(e, now);
  if (report.done()) worker.done = true;
  return absl::OkStatus();
}

void Progress::CountSteps(int64_t begin, int64_t end) {
  const int64_t g = options_.global_batch;
  const int64_t n = options_.train_samples;
  const int64_t steps_per_epoch = data::SyncStepsPerEpoch(n, g);
  if (steps_per_epoch == 0) return;
  begin = std::max<int64_t>(begin, 0);
  if (end > static_cast<int64_t>(counted_steps_.size())) counted_steps_.resize(end, false);
  for (int64_t t = begin; t < end; ++t) {
    if (counted_steps_[t]) continue;
    counted_steps_[t] = true;
    epochs_[static_cast<int>(t / steps_per_epoch)].applied_samples +=
        data::SyncGlobalBatchSize(n, g, t % steps_per_epoch);
  }
}

void Progress::CountLease(int64_t lease_id, int epoch, int64_t samples) {
  if (lease_id < 0) return;
  if (lease_id >= static_cast<int64_t>(counted_leases_.size())) counted_leases_.resize(lease_id + 1, false);
  if (counted_leases_[lease_id]) return;
  counted_leases_[lease_id] = true;
  epochs_[epoch].applied_samples += samples;
}

absl::StatusOr<EvalLease> Progress::LeaseEval(int worker_rank, int epoch, absl::Time now) {
  if (epoch < 0 || epoch >= job().epochs()) {
    return absl::OutOfRangeError(absl::StrCat("evaluation lease for worker ", worker_rank, ": epoch ", epoch,
                                              " is outside the job's epochs [0, ", job().epochs(), ")"));
  }
  CloseUnevaluatedBefore(epoch, now);
  if (epochs_[epoch].complete && !eval_.opened(epoch)) {
    EvalLease done;
    done.epoch = epoch;
    done.epoch_done = true;
    return done;
  }
  absl::StatusOr<EvalLease> lease = eval_.Next(worker_rank, epoch, now);
  if (lease.ok()) UpdateCompletion(epoch, now);  // An empty test set is complete at once.
  return lease;
}

int Progress::WorkerGone(int rank) {
  auto it = workers_.find(rank);
  if (it != workers_.end()) it->second.done = false;
  return eval_.Release(rank);
}

bool Progress::AllDone(const std::vector<int>& live_workers) const {
  if (live_workers.empty() || eval_.any_incomplete()) return false;
  for (int rank : live_workers) {
    auto it = workers_.find(rank);
    if (it == workers_.end() || !it->second.done) return false;
  }
  return true;
}

bool Progress::TryFinish(const std::vector<int>& live_workers, absl::Time now) {
  if (finished()) return true;
  if (!AllDone(live_workers)) return false;
  for (auto& [e, data] : epochs_) {
    if (!data.complete && !eval_.opened(e)) Complete(&data, now);
  }
  finished_at_ = now;
  return true;
}

EpochSummary Progress::Summarize(int epoch, const Epoch& data) const {
  EpochSummary summary;
  summary.set_epoch(epoch);
  summary.set_train_loss(Ratio(data.train_loss_sum, static_cast<double>(data.train_samples)));
  const bool evaluated = data.complete && eval_.opened(epoch);
  const EvalPool::Totals eval = eval_.totals(epoch);
  const double samples = static_cast<double>(eval.samples);
  summary.set_test_loss(evaluated ? Ratio(eval.loss_sum, samples) : kNaN);
  summary.set_test_accuracy(evaluated ? Ratio(static_cast<double>(eval.correct), samples) : kNaN);
  if (const EvalScores* scores = eval_.scores(epoch); evaluated && scores != nullptr && scores->any()) {
    summary.set_test_auc(scores->auc());
    summary.set_test_auc_error_bound(scores->error_bound());
  }
  if (data.train_auc.has_value()) {
    summary.set_train_auc(*data.train_auc);
  } else if (data.train_scores != nullptr) {
    summary.set_train_auc(TrainAuc(data));
  }
  summary.set_samples(counts_applied() ? data.applied_samples : data.train_samples);
  summary.set_seconds(data.seconds);
  *summary.mutable_step_times() = data.step_times;
  return summary;
}

std::optional<double> Progress::final_test_accuracy() const {
  for (auto it = epochs_.rbegin(); it != epochs_.rend(); ++it) {
    if (!it->second.complete) continue;
    const double accuracy = Summarize(it->first, it->second).test_accuracy();
    if (std::isfinite(accuracy)) return accuracy;
  }
  return std::nullopt;
}

std::optional<double> Progress::final_test_loss() const {
  for (auto it = epochs_.rbegin(); it != epochs_.rend(); ++it) {
    if (!it->second.complete) continue;
    const EpochSummary summary = Summarize(it->first, it->second);
    if (std::isfinite(summary.test_accuracy())) return summary.test_loss();
  }
  return std::nullopt;
}

std::optional<Progress::FinalAuc> Progress::final_test_auc() const {
  for (auto it = epochs_.rbegin(); it != epochs_.rend(); ++it) {
    if (!it->second.complete) continue;
    const EpochSummary summary = Summarize(it->first, it->second);
    if (summary.has_test_auc()) {
      return FinalAuc{summary.test_auc(), summary.test_auc_error_bound(), summary.test_loss()};
    }
  }
  return std::nullopt;
}

absl::Time Progress::End(absl::Time now) const { return finished_at_.value_or(now); }

int64_t Progress::Step() const { return job().mode() == SYNC ? max_step_ : batches_; }

void Progress::ForgetWorkers(const std::function<bool(int rank)>& forgotten) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (!forgotten(it->first)) {
      ++it;
      continue;
    }
    forgotten_.samples += it->second.samples;
    AddTraffic(it->second.traffic, &forgotten_.traffic);
    AddStaleness(it->second.staleness, &forgotten_.staleness);
    ++forgotten_workers_;
    it = workers_.erase(it);
  }
}

int64_t Progress::TotalTrainSamples() const {
  int64_t total = forgotten_.samples;
  for (const auto& [rank, worker] : workers_) total += worker.samples;
  return total;
}

StepTimes Progress::TotalStepTimes() const {
  StepTimes total;
  for (const auto& [e, data] : epochs_) AddStepTimes(data.step_times, &total);
  return total;
}

double Progress::samples_per_second(absl::Time now) const {
  if (!start_.has_value()) return 0;
  const double seconds = absl::ToDoubleSeconds(End(now) - *start_);
  return seconds > 0 ? static_cast<double>(TotalTrainSamples()) / seconds : 0;
}

JobStatus Progress::Status(absl::Time now) const {
  JobStatus status;
  status.set_epoch(max_epoch_);
  status.set_epochs(job().epochs());
  const int64_t step = Step();
  status.set_step(step);
  status.set_total_steps(options_.total_steps);
  double loss_sum = 0;
  int64_t samples = 0;
  for (const auto& [loss, n] : recent_) {
    loss_sum += loss;
    samples += n;
  }
  status.set_recent_loss(samples > 0 ? loss_sum / static_cast<double>(samples) : 0);
  status.set_samples_per_second(samples_per_second(now));
  double eta = 0;
  if (start_.has_value() && step > 0 && !finished_at_.has_value()) {
    const double elapsed = absl::ToDoubleSeconds(now - *start_);
    eta = std::max<double>(0, options_.total_steps - step) * elapsed / static_cast<double>(step);
  }
  status.set_eta_seconds(eta);
  *status.mutable_step_times() = TotalStepTimes();
  for (const auto& [epoch, data] : epochs_) {
    if (data.complete) *status.add_epochs_done() = Summarize(epoch, data);
  }
  return status;
}

void Progress::FillStatus(absl::Time now, DashboardStatus* out) const {
  const JobStatus status = Status(now);
  out->epoch = status.epoch();
  out->epochs = status.epochs();
  out->step = status.step();
  out->total_steps = status.total_steps();
  out->samples_per_second = status.samples_per_second();
  out->eta_seconds = status.eta_seconds();
  out->recent_loss = recent_.empty() ? kNaN : status.recent_loss();
  for (const auto& [epoch, data] : epochs_) {
    if (!data.complete) continue;
    const EpochSummary s = Summarize(epoch, data);
    EpochStatus e;
    e.epoch = epoch;
    e.train_loss = s.train_loss();
    e.test_loss = s.test_loss();
    e.test_accuracy = s.test_accuracy();
    if (s.has_test_auc()) e.test_auc = s.test_auc();
    if (s.has_train_auc()) e.train_auc = s.train_auc();
    e.samples = s.samples();
    e.seconds = s.seconds();
    // A restored epoch from before end times were kept has none (unknown).
    if (data.end != absl::Time()) e.end_seconds = absl::ToDoubleSeconds(data.end - options_.created);
    out->epochs_done.push_back(e);
  }
  // The window is shorter while training has run for less than a window.
  const absl::Duration window = start_.has_value() ? std::min(kRecentWindow, now - *start_) : kRecentWindow;
  for (const auto& [rank, worker] : workers_) {
    WorkerStatus w;
    w.rank = rank;
    w.samples = worker.samples;
    int64_t recent = 0;
    for (const auto& [at, n] : worker.recent) recent += at >= now - kRecentWindow ? n : 0;
    w.samples_per_second = window > absl::ZeroDuration() ? recent / absl::ToDoubleSeconds(window) : 0;
    w.step = worker.step;
    w.bytes_sent = worker.traffic.bytes_sent();
    w.bytes_received = worker.traffic.bytes_received();
    w.compression_saved_bytes = worker.traffic.compression_saved_bytes();
    w.staleness_pulls = worker.staleness.pulls();
    w.staleness_mean =
        Ratio(static_cast<double>(worker.staleness.sum()), static_cast<double>(worker.staleness.pulls()));
    w.staleness_max = worker.staleness.max();
    out->workers.push_back(w);
  }
}

// {"state": "FINISHED", "failure": null, "final_test_accuracy": 0.87, "final_test_loss": 0.36,
//  ["final_test_auc": 0.79, "final_test_auc_error_bound": 2e-05, "final_test_logloss": 0.45,]
//  "epochs": [{"epoch": 0, "train_loss": .., "test_loss": .., "test_accuracy": .., ["test_auc": ..,
//              "test_auc_error_bound": ..,] ["train_auc": ..,] "samples": .., "seconds": .., "complete": true,
//              "step_time_ms": {..}}, ...],
//  "samples_per_second": .., "step_time_ms": {"steps": .., "compute": .., "push": .., "wait": ..,
//  "pull": .., "overlapped": ..}, "wall_seconds": .., "workers": [{"rank": 0, "samples": ..,
//  "bytes_sent": .., "bytes_received": .., "compression_saved_bytes": .., "staleness": {"pulls": ..,
//  "mean": .. (null without pulls), "max": ..}}, ...],
//  "membership_events": [{"seconds": 12.5, "role": "worker", "rank": 1, "kind": "died"}, ...],
//  "live_workers": [0, 2], "mode": "sync", "job": {...}}
// Event seconds count from the scheduler's start, like wall_seconds.
// Epochs that got training reports but never completed are listed too, with complete = false and
// null test numbers. The AUC members [..] are there only for jobs whose workers reported scores
// (some epoch has a test AUC), so other jobs' summaries are as they were; in such a job an epoch
// without an AUC has null there.
std::string Progress::SummaryJson(JobState state, absl::string_view failure, absl::Time now,
                                  const std::vector<MembershipEvent>& events, const std::vector<int>& live_workers,
                                  absl::string_view more) const {
  const absl::Time end = End(now);
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"state\": ", JsonString(JobState_Name(state)), ",\n");
  absl::StrAppend(&out, "  \"failure\": ", failure.empty() ? "null" : JsonString(failure), ",\n");
  absl::StrAppend(&out, "  \"final_test_accuracy\": ", JsonNumber(final_test_accuracy().value_or(kNaN)), ",\n");
  absl::StrAppend(&out, "  \"final_test_loss\": ", JsonNumber(final_test_loss().value_or(kNaN)), ",\n");
  const std::optional<FinalAuc> auc = final_test_auc();
  if (auc.has_value()) {
    absl::StrAppend(&out, "  \"final_test_auc\": ", JsonNumber(auc->auc), ",\n");
    absl::StrAppend(&out, "  \"final_test_auc_error_bound\": ", JsonNumber(auc->error_bound), ",\n");
    absl::StrAppend(&out, "  \"final_test_logloss\": ", JsonNumber(auc->logloss), ",\n");
  }
  out += "  \"epochs\": [";
  bool first = true;
  for (const auto& [epoch, data] : epochs_) {
    const EpochSummary s = Summarize(epoch, data);
    std::string auc_members;
    if (auc.has_value()) {
      auc_members =
          absl::StrCat(", \"test_auc\": ", JsonNumber(s.has_test_auc() ? s.test_auc() : kNaN),
                       ", \"test_auc_error_bound\": ", JsonNumber(s.has_test_auc() ? s.test_auc_error_bound() : kNaN));
    }
    if (s.has_train_auc()) absl::StrAppend(&auc_members, ", \"train_auc\": ", JsonNumber(s.train_auc()));
    absl::StrAppend(&out, first ? "\n" : ",\n", "    {\"epoch\": ", epoch,
                    ", \"train_loss\": ", JsonNumber(s.train_loss()), ", \"test_loss\": ", JsonNumber(s.test_loss()),
                    ", \"test_accuracy\": ", JsonNumber(s.test_accuracy()), auc_members, ", \"samples\": ", s.samples(),
                    ", \"seconds\": ", JsonNumber(s.seconds()), ", \"complete\": ", data.complete ? "true" : "false",
                    ", \"step_time_ms\": ", StepTimesJson(data.step_times), "}");
    first = false;
  }
  out += first ? "],\n" : "\n  ],\n";
  absl::StrAppend(&out, "  \"samples_per_second\": ", JsonNumber(samples_per_second(now)), ",\n");
  // Per-step means over the whole run (see StepTimes in proto/scheduler.proto).
  absl::StrAppend(&out, "  \"step_time_ms\": ", StepTimesJson(TotalStepTimes()), ",\n");
  absl::StrAppend(&out, "  \"wall_seconds\": ", JsonNumber(absl::ToDoubleSeconds(end - options_.created)), ",\n");
  out += "  \"workers\": [";
  first = true;
  for (const auto& [rank, worker] : workers_) {
    const Staleness& st = worker.staleness;
    absl::StrAppend(&out, first ? "" : ", ", "{\"rank\": ", rank, ", \"samples\": ", worker.samples,
                    ", \"bytes_sent\": ", worker.traffic.bytes_sent(),
                    ", \"bytes_received\": ", worker.traffic.bytes_received(),
                    ", \"compression_saved_bytes\": ", worker.traffic.compression_saved_bytes(),
                    ", \"staleness\": {\"pulls\": ", st.pulls(),
                    ", \"mean\": ", JsonNumber(Ratio(static_cast<double>(st.sum()), static_cast<double>(st.pulls()))),
                    ", \"max\": ", st.max(), "}}");
    first = false;
  }
  out += "],\n";
  if (forgotten_workers_ > 0) {
    // Workers gone long ago, summed (ForgetWorkers).
    absl::StrAppend(&out, "  \"forgotten_workers\": {\"workers\": ", forgotten_workers_,
                    ", \"samples\": ", forgotten_.samples, ", \"bytes_sent\": ", forgotten_.traffic.bytes_sent(),
                    ", \"bytes_received\": ", forgotten_.traffic.bytes_received(),
                    ", \"compression_saved_bytes\": ", forgotten_.traffic.compression_saved_bytes(), "},\n");
  }
  out += "  \"membership_events\": [";
  first = true;
  for (const MembershipEvent& event : events) {
    absl::StrAppend(&out, first ? "" : ", ",
                    "{\"seconds\": ", JsonNumber(absl::ToDoubleSeconds(event.at - options_.created)),
                    ", \"role\": ", JsonString(RoleName(event.role)), ", \"rank\": ", event.rank,
                    ", \"kind\": ", JsonString(ChangeKindName(event.kind)), "}");
    first = false;
  }
  out += "],\n";
  absl::StrAppend(&out, "  \"live_workers\": [", absl::StrJoin(live_workers, ", "), "],\n");
  absl::StrAppend(&out, more);
  absl::StrAppend(&out, "  \"mode\": ", JsonString(ModeName(job().mode())), ",\n");
  absl::StrAppend(&out, "  \"job\": ", JobSpecJson(job()), "\n");
  out += "}\n";
  return out;
}

}  // namespace scheduler
}  // namespace pstrain
