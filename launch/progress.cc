#include "launch/progress.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/step_times.h"

namespace pstrain {
namespace launch {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  const int64_t h = total / 3600, m = total / 60 % 60, s = total % 60;
  if (h > 0) return absl::StrFormat("%dh%02dm%02ds", h, m, s);
  if (m > 0) return absl::StrFormat("%dm%02ds", m, s);
  return absl::StrFormat("%ds", s);
}

std::string FormatRate(double per_second) {
  if (!std::isfinite(per_second) || per_second < 0) return "--";
  // Thresholds sit where rounding to one decimal would reach the next unit ("1000.0k").
  if (per_second < 999.5) return absl::StrFormat("%.0f", per_second);
  if (per_second < 999950.0) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.1fM", per_second / 1e6);
}

std::string FormatProgressLine(const JobStatus& status, int num_servers, int num_workers) {
  switch (status.state()) {
    case FINISHED:
      return "job finished";
    case FAILED:
      return absl::StrCat("job failed: ", status.failure());
    case RUNNING:
      break;
    default:
      return absl::StrFormat("waiting for roles: servers %d/%d  workers %d/%d", status.registered_servers(),
                             num_servers, status.registered_workers(), num_workers);
  }
  std::string line = absl::StrFormat("epoch %d/%d  step %d/%d", status.epoch() + 1, status.epochs(), status.step(),
                                     status.total_steps());
  // Before the first report there is no loss or rate worth showing.
  if (status.step() > 0) {
    absl::StrAppendFormat(&line, "  loss %.4f  %s samples/s  ETA %s", status.recent_loss(),
                          FormatRate(status.samples_per_second()), FormatDuration(status.eta_seconds()));
  }
  return line;
}

std::string FormatEpochLine(const EpochSummary& epoch, int epochs) {
  std::string line =
      absl::StrFormat("epoch %d/%d done: train_loss %.4f", epoch.epoch() + 1, epochs, epoch.train_loss());
  // A job without a test set (a data stream) has no test figures to show.
  if (std::isfinite(epoch.test_accuracy())) {
    absl::StrAppendFormat(&line, "  test_loss %.4f  test_acc %.4f", epoch.test_loss(), epoch.test_accuracy());
  }
  if (epoch.has_test_auc()) absl::StrAppendFormat(&line, "  test_auc %.4f", epoch.test_auc());
  if (epoch.has_train_auc() && std::isfinite(epoch.train_auc())) {
    absl::StrAppendFormat(&line, "  progressive_auc %.4f", epoch.train_auc());
  }
  absl::StrAppendFormat(&line, "  %.1f s", epoch.seconds());
  if (epoch.step_times().steps() > 0) absl::StrAppend(&line, "  ", FormatStepTimes(epoch.step_times()));
  return line;
}

std::string FormatFinalResult(const JobStatus& status, double wall_seconds, absl::string_view summary_path) {
  std::string accuracy = "n/a";
  int64_t samples = 0;
  double seconds = 0;
  if (status.epochs_done_size() > 0) {
    const EpochSummary& last = status.epochs_done(status.epochs_done_size() - 1);
    // A job without a test set (a data stream) has none.
    if (std::isfinite(last.test_accuracy())) accuracy = absl::StrFormat("%.4f", last.test_accuracy());
    if (last.has_test_auc()) absl::StrAppendFormat(&accuracy, "  test_auc %.4f", last.test_auc());
    if (last.has_train_auc() && std::isfinite(last.train_auc())) {
      absl::StrAppendFormat(&accuracy, "  progressive_auc %.4f", last.train_auc());
    }
    for (const EpochSummary& e : status.epochs_done()) {
      samples += e.samples();
      seconds += e.seconds();
    }
  }
  // With no completed epoch and no rate yet there is nothing to report ("--").
  double rate = seconds > 0 ? samples / seconds : status.samples_per_second();
  if (rate <= 0) rate = -1;
  std::string line = absl::StrCat("final test_acc ", accuracy, "  ", FormatRate(rate), " samples/s  wall ",
                                  FormatDuration(wall_seconds));
  if (!summary_path.empty()) absl::StrAppend(&line, "  summary ", summary_path);
  return line;
}

}  // namespace launch
}  // namespace pstrain
