#include "scheduler/stream_scores.h"

#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "data/score_histogram_proto.h"

namespace pstrain {
namespace scheduler {

StreamScores::StreamScores(int window_files, const StreamState& saved) : window_files_(window_files) {
  CHECK_GE(window_files_, 1);
  for (const StreamFileScoresState& s : saved.scores()) {
    Entry& e = files_[s.file()];
    e.closed = !s.open();
    e.samples = s.samples();
    e.log_loss_sum = s.log_loss_sum();
    if (s.has_auc()) e.auc = s.auc();
    if (s.has_histogram()) {
      e.histogram = std::make_unique<data::ScoreHistogram>();
      // The state was checked when it was read (CheckSaved).
      CHECK(data::MergeScoreHistogramProto(s.histogram(), e.histogram.get()).ok());
    }
  }
  Trim();
}

absl::Status StreamScores::CheckSaved(const StreamState& saved) {
  std::set<int64_t> seen;
  for (const StreamFileScoresState& s : saved.scores()) {
    const std::string where = absl::StrCat("scheduler state: scores of stream file ", s.file());
    if (s.file() < 0 || s.file() >= saved.files_size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected a file in [0, ", saved.files_size(), ")"));
    }
    if (!seen.insert(s.file()).second) return absl::InvalidArgumentError(absl::StrCat(where, ": given twice"));
    if (s.samples() < 0 || !std::isfinite(s.log_loss_sum()) || s.log_loss_sum() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.samples(), " samples with log loss sum ",
                                                     s.log_loss_sum(), ", expected >= 0 and finite"));
    }
    if (!s.has_histogram()) {
      if (s.open()) return absl::InvalidArgumentError(absl::StrCat(where, ": an open file without its histogram"));
      continue;
    }
    absl::StatusOr<int64_t> count = data::CheckScoreHistogramProto(s.histogram());
    if (!count.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", count.status().message()));
    if (*count != s.samples()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a histogram of ", *count, " predictions for ", s.samples(), " samples"));
    }
  }
  return absl::OkStatus();
}

absl::Status StreamScores::Check(const TrainStats& train, int worker_rank, int64_t files) const {
  int64_t predictions = 0;
  std::set<int64_t> seen;
  for (const FileScores& f : train.files()) {
    const std::string where =
        absl::StrCat("progress report from worker ", worker_rank, ": scores of stream file ", f.file());
    if (f.file() < 0 || f.file() >= files) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected a file in [0, ", files, "), the ready files"));
    }
    if (!seen.insert(f.file()).second) return absl::InvalidArgumentError(absl::StrCat(where, ": given twice"));
    absl::StatusOr<int64_t> count = data::CheckScoreHistogramProto(f.scores());
    if (!count.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", count.status().message()));
    if (!std::isfinite(f.log_loss_sum()) || f.log_loss_sum() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": log loss sum ", f.log_loss_sum(), ", expected finite and >= 0"));
    }
    predictions += *count;
  }
  if (predictions > train.samples()) {
    return absl::InvalidArgumentError(absl::StrCat("progress report from worker ", worker_rank, ": ", predictions,
                                                   " predictions over the stream's files for ", train.samples(),
                                                   " samples, expected at most one a sample"));
  }
  return absl::OkStatus();
}

void StreamScores::Add(const TrainStats& train) {
  for (const FileScores& f : train.files()) {
    Entry& e = files_[f.file()];
    if (e.closed) continue;  // reported after every live worker had passed it
    if (e.histogram == nullptr) e.histogram = std::make_unique<data::ScoreHistogram>();
    const int64_t before = e.histogram->count();
    (void)data::MergeScoreHistogramProto(f.scores(), e.histogram.get());  // checked
    e.samples += e.histogram->count() - before;
    e.log_loss_sum += f.log_loss_sum();
  }
  Trim();
}

void StreamScores::CloseBefore(const std::vector<data::StreamFile>& files, int64_t trained) {
  bool closed_any = false;
  // A trained file with no scores (every prediction of it was lost with the workers that made
  // them) is listed too, closed with none.
  for (; listed_through_ < static_cast<int64_t>(files.size()); ++listed_through_) {
    const data::StreamFile& f = files[listed_through_];
    if (f.first + f.records > trained) break;
    if (auto [it, added] = files_.try_emplace(listed_through_); added) {
      it->second.closed = true;
      closed_any = true;
    }
  }
  for (auto& [index, e] : files_) {
    if (e.closed || index >= static_cast<int64_t>(files.size())) continue;
    if (files[index].first + files[index].records > trained) continue;
    e.closed = true;
    if (e.histogram != nullptr) {
      const absl::StatusOr<double> auc = e.histogram->Auc();
      if (auc.ok()) e.auc = *auc;
    }
    closed_any = true;
  }
  if (closed_any) Trim();
}

void StreamScores::Trim() {
  int kept = 0;
  for (auto it = files_.rbegin(); it != files_.rend(); ++it) {
    if (kept++ >= window_files_ && it->second.closed) it->second.histogram.reset();
  }
}

StreamScores::Figures StreamScores::FiguresOf(const Entry& e) {
  Figures f;
  f.samples = e.samples;
  f.log_loss =
      e.samples > 0 ? e.log_loss_sum / static_cast<double>(e.samples) : std::numeric_limits<double>::quiet_NaN();
  if (e.auc.has_value()) {
    f.auc = e.auc;
  } else if (!e.closed && e.histogram != nullptr) {
    const absl::StatusOr<double> auc = e.histogram->Auc();
    if (auc.ok()) f.auc = *auc;
  }
  return f;
}

std::vector<StreamScores::File> StreamScores::Files() const {
  std::vector<File> out;
  out.reserve(files_.size());
  for (const auto& [index, e] : files_) out.push_back(File{index, e.closed, FiguresOf(e)});
  return out;
}

StreamScores::Figures StreamScores::Window() const {
  data::ScoreHistogram merged;
  Entry window;
  int taken = 0;
  for (auto it = files_.rbegin(); it != files_.rend() && taken < window_files_; ++it, ++taken) {
    if (it->second.histogram != nullptr) merged.Merge(*it->second.histogram);
    window.samples += it->second.samples;
    window.log_loss_sum += it->second.log_loss_sum;
  }
  Figures f = FiguresOf(window);
  const absl::StatusOr<double> auc = merged.Auc();
  if (auc.ok()) f.auc = *auc;
  return f;
}

void StreamScores::Save(StreamState* state) const {
  for (const auto& [index, e] : files_) {
    StreamFileScoresState* s = state->add_scores();
    s->set_file(index);
    s->set_open(!e.closed);
    s->set_samples(e.samples);
    s->set_log_loss_sum(e.log_loss_sum);
    if (e.auc.has_value()) s->set_auc(*e.auc);
    if (e.histogram != nullptr) *s->mutable_histogram() = data::ScoreHistogramToProto(*e.histogram);
  }
}

}  // namespace scheduler
}  // namespace pstrain
