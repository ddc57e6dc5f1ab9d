#include "common/step_times.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pstrain {
namespace {

// Milliseconds per step.
double PerStep(double seconds, const StepTimes& times) {
  return times.steps() > 0 ? 1e3 * seconds / static_cast<double>(times.steps()) : 0.0;
}

}  // namespace

void AddStepTimes(const StepTimes& add, StepTimes* total) {
  total->set_steps(total->steps() + add.steps());
  total->set_compute_seconds(total->compute_seconds() + add.compute_seconds());
  total->set_push_seconds(total->push_seconds() + add.push_seconds());
  total->set_wait_seconds(total->wait_seconds() + add.wait_seconds());
  total->set_pull_seconds(total->pull_seconds() + add.pull_seconds());
  total->set_overlapped_seconds(total->overlapped_seconds() + add.overlapped_seconds());
}

absl::Status CheckStepTimes(const StepTimes& times, const std::string& what) {
  if (times.steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": step_times.steps is ", times.steps(), ", expected >= 0"));
  }
  const struct {
    const char* name;
    double value;
  } fields[] = {{"compute_seconds", times.compute_seconds()},
                {"push_seconds", times.push_seconds()},
                {"wait_seconds", times.wait_seconds()},
                {"pull_seconds", times.pull_seconds()},
                {"overlapped_seconds", times.overlapped_seconds()}};
  for (const auto& f : fields) {
    if (!std::isfinite(f.value) || f.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": step_times.", f.name, " is ", f.value, ", expected a finite number >= 0"));
    }
  }
  return absl::OkStatus();
}

std::string StepTimesJson(const StepTimes& t) {
  return absl::StrFormat(
      "{\"steps\": %d, \"compute\": %.3f, \"push\": %.3f, \"wait\": %.3f, \"pull\": %.3f, \"overlapped\": %.3f}",
      t.steps(), PerStep(t.compute_seconds(), t), PerStep(t.push_seconds(), t), PerStep(t.wait_seconds(), t),
      PerStep(t.pull_seconds(), t), PerStep(t.overlapped_seconds(), t));
}

std::string FormatStepTimes(const StepTimes& t) {
  if (t.steps() == 0) return "";
  const double total = t.compute_seconds() + t.push_seconds() + t.wait_seconds() + t.pull_seconds();
  return absl::StrFormat("step %.1f ms = compute %.1f + push %.1f + wait %.1f + pull %.1f (%.1f overlapped)",
                         PerStep(total, t), PerStep(t.compute_seconds(), t), PerStep(t.push_seconds(), t),
                         PerStep(t.wait_seconds(), t), PerStep(t.pull_seconds(), t),
                         PerStep(t.overlapped_seconds(), t));
}

}  // namespace pstrain
