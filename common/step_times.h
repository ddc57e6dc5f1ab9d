// Arithmetic and formatting of StepTimes (proto/scheduler.proto): where training steps spend their
// time. Workers sum their steps into it, the scheduler sums the workers' reports per epoch, and the
// launcher and the run summary print per-step means.
#ifndef PSTRAIN_COMMON_STEP_TIMES_H_
#define PSTRAIN_COMMON_STEP_TIMES_H_

#include <string>

#include "absl/status/status.h"
#include "proto/scheduler.pb.h"

namespace pstrain {

// total += add, field by field.
void AddStepTimes(const StepTimes& add, StepTimes* total);

// OK when every field is finite and >= 0; otherwise INVALID_ARGUMENT naming the field, prefixed
// with `what` (e.g. "progress report from worker 2").
absl::Status CheckStepTimes(const StepTimes& times, const std::string& what);

// Per-step means in milliseconds, as a JSON object: {"steps": 120, "compute": 3.1, "push": 0.2,
// "wait": 1.4, "pull": 0.3, "overlapped": 0.9}; all zero when steps == 0.
std::string StepTimesJson(const StepTimes& times);

// The same for a progress line: "step 5.0 ms = compute 3.1 + push 0.2 + wait 1.4 + pull 0.3
// (0.9 overlapped)"; empty when steps == 0.
std::string FormatStepTimes(const StepTimes& times);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_STEP_TIMES_H_
