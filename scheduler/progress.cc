#include "scheduler/progress.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
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

}  // namespace

Progress::Progress(Options options)
    : options_(std::move(options)),
      last_epoch_end_(options_.created),
      worker_samples_(options_.job.num_workers(), 0),
      worker_done_(options_.job.num_workers(), false) {}

void Progress::Start(absl::Time now) {
  if (start_.has_value()) return;
  start_ = now;
  last_epoch_end_ = now;
}

absl::Status Progress::Add(const ProgressReport& report, absl::Time now) {
  const int rank = report.worker_rank();
  if (rank < 0 || rank >= job().num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("progress report: worker rank ", rank,
                                                   " is outside [0, ", job().num_workers(), ")"));
  }
  if (report.epoch() < 0 || report.epoch() >= job().epochs()) {
    return absl::InvalidArgumentError(absl::StrCat("progress report from worker ", rank, ": epoch ",
                                                   report.epoch(), " is outside [0, ",
                                                   job().epochs(), ")"));
  }
  const TrainStats& train = report.train();
  if (train.samples() < 0 || train.steps() < 0 ||
      (report.has_eval() && (report.eval().samples() < 0 || report.eval().correct() < 0 ||
                             report.eval().correct() > report.eval().samples()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress report from worker ", rank, " for epoch ", report.epoch(),
        ": negative or inconsistent counts (train samples ", train.samples(), ", steps ",
        train.steps(), ", eval samples ", report.eval().samples(), ", correct ",
        report.eval().correct(), ")"));
  }
  Start(now);

  Epoch& epoch = epochs_[report.epoch()];
  if (epoch.evals.empty()) epoch.evals.resize(job().num_workers());
  epoch.train_loss_sum += train.loss_sum();
  epoch.train_samples += train.samples();
  worker_samples_[rank] += train.samples();
  max_epoch_ = std::max(max_epoch_, report.epoch());
  max_step_ = std::max(max_step_, report.step());
  batches_ += train.steps();
  if (train.samples() > 0) {
    recent_.emplace_back(train.loss_sum(), train.samples());
    const size_t window = std::max<size_t>(4, 2 * static_cast<size_t>(job().num_workers()));
    while (recent_.size() > window) recent_.pop_front();
  }

  if (report.has_eval()) {
    if (!epoch.evals[rank].has_value()) ++epoch.evals_received;
    epoch.evals[rank] = report.eval();
    if (!epoch.complete && epoch.evals_received == job().num_workers()) {
      epoch.complete = true;
      epoch.seconds = absl::ToDoubleSeconds(now - last_epoch_end_);
      last_epoch_end_ = now;
    }
  }
  if (report.done() && !worker_done_[rank]) {
    worker_done_[rank] = true;
    ++workers_done_;
    if (finished()) finished_at_ = now;
  }
  return absl::OkStatus();
}

EpochSummary Progress::Summarize(int epoch, const Epoch& data) const {
  EpochSummary summary;
  summary.set_epoch(epoch);
  summary.set_train_loss(Ratio(data.train_loss_sum, static_cast<double>(data.train_samples)));
  double loss_sum = 0;
  int64_t correct = 0, samples = 0;
  for (const std::optional<EvalStats>& eval : data.evals) {
    if (!eval.has_value()) continue;
    loss_sum += eval->loss_sum();
    correct += eval->correct();
    samples += eval->samples();
  }
  summary.set_test_loss(data.complete ? Ratio(loss_sum, static_cast<double>(samples)) : kNaN);
  summary.set_test_accuracy(data.complete ? Ratio(static_cast<double>(correct), static_cast<double>(samples))
                                          : kNaN);
  summary.set_samples(data.train_samples);
  summary.set_seconds(data.seconds);
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

absl::Time Progress::End(absl::Time now) const { return finished_at_.value_or(now); }

int64_t Progress::Step() const { return job().mode() == SYNC ? max_step_ : batches_; }

int64_t Progress::TotalTrainSamples() const {
  int64_t total = 0;
  for (int64_t s : worker_samples_) total += s;
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
  for (const auto& [epoch, data] : epochs_) {
    if (data.complete) *status.add_epochs_done() = Summarize(epoch, data);
  }
  return status;
}

// {"state": "FINISHED", "failure": null, "final_test_accuracy": 0.87, "final_test_loss": 0.36,
//  "epochs": [{"epoch": 0, "train_loss": .., "test_loss": .., "test_accuracy": .., "samples": ..,
//              "seconds": .., "complete": true}, ...],
//  "samples_per_second": .., "wall_seconds": .., "workers": [{"rank": 0, "samples": ..}, ...],
//  "mode": "sync", "job": {...}}
// Epochs that got training reports but never completed are listed too, with complete = false and
// null test numbers.
std::string Progress::SummaryJson(JobState state, absl::string_view failure, absl::Time now) const {
  const absl::Time end = End(now);
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"state\": ", JsonString(JobState_Name(state)), ",\n");
  absl::StrAppend(&out, "  \"failure\": ", failure.empty() ? "null" : JsonString(failure), ",\n");
  absl::StrAppend(&out, "  \"final_test_accuracy\": ", JsonNumber(final_test_accuracy().value_or(kNaN)),
                  ",\n");
  absl::StrAppend(&out, "  \"final_test_loss\": ", JsonNumber(final_test_loss().value_or(kNaN)), ",\n");
  out += "  \"epochs\": [";
  bool first = true;
  for (const auto& [epoch, data] : epochs_) {
    const EpochSummary s = Summarize(epoch, data);
    absl::StrAppend(&out, first ? "\n" : ",\n", "    {\"epoch\": ", epoch,
                    ", \"train_loss\": ", JsonNumber(s.train_loss()),
                    ", \"test_loss\": ", JsonNumber(s.test_loss()),
                    ", \"test_accuracy\": ", JsonNumber(s.test_accuracy()),
                    ", \"samples\": ", s.samples(), ", \"seconds\": ", JsonNumber(s.seconds()),
                    ", \"complete\": ", data.complete ? "true" : "false", "}");
    first = false;
  }
  out += first ? "],\n" : "\n  ],\n";
  absl::StrAppend(&out, "  \"samples_per_second\": ", JsonNumber(samples_per_second(now)), ",\n");
  absl::StrAppend(&out, "  \"wall_seconds\": ", JsonNumber(absl::ToDoubleSeconds(end - options_.created)),
                  ",\n");
  out += "  \"workers\": [";
  for (int rank = 0; rank < static_cast<int>(worker_samples_.size()); ++rank) {
    absl::StrAppend(&out, rank == 0 ? "" : ", ", "{\"rank\": ", rank,
                    ", \"samples\": ", worker_samples_[rank], "}");
  }
  out += "],\n";
  absl::StrAppend(&out, "  \"mode\": ", JsonString(ModeName(job().mode())), ",\n");
  absl::StrAppend(&out, "  \"job\": ", JobSpecJson(job()), "\n");
  out += "}\n";
  return out;
}

}  // namespace scheduler
}  // namespace pstrain
