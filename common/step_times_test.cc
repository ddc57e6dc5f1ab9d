#include "common/step_times.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

StepTimes Times(int64_t steps, double compute, double push, double wait, double pull, double overlapped) {
  StepTimes t;
  t.set_steps(steps);
  t.set_compute_seconds(compute);
  t.set_push_seconds(push);
  t.set_wait_seconds(wait);
  t.set_pull_seconds(pull);
  t.set_overlapped_seconds(overlapped);
  return t;
}

TEST(StepTimesTest, AddsFieldByFieldAndPrintsPerStepMilliseconds) {
  StepTimes total = Times(2, 0.004, 0.001, 0.002, 0.001, 0.0005);
  AddStepTimes(Times(2, 0.008, 0.001, 0.002, 0.001, 0.0015), &total);
  EXPECT_EQ(total.steps(), 4);
  EXPECT_EQ(StepTimesJson(total),
            "{\"steps\": 4, \"compute\": 3.000, \"push\": 0.500, \"wait\": 1.000, \"pull\": 0.500, "
            "\"overlapped\": 0.500}");
  EXPECT_EQ(FormatStepTimes(total), "step 5.0 ms = compute 3.0 + push 0.5 + wait 1.0 + pull 0.5 (0.5 overlapped)");
}

TEST(StepTimesTest, NoStepsPrintsZerosOrNothing) {
  EXPECT_EQ(FormatStepTimes(StepTimes()), "");
  EXPECT_THAT(StepTimesJson(StepTimes()), HasSubstr("\"steps\": 0, \"compute\": 0.000"));
}

TEST(StepTimesTest, NegativeOrNonFiniteFieldsAreRefused) {
  EXPECT_TRUE(CheckStepTimes(Times(1, 1, 1, 1, 1, 1), "report").ok());
  absl::Status s = CheckStepTimes(Times(1, 1, -1, 1, 1, 1), "report from worker 3");
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("report from worker 3: step_times.push_seconds is -1"));
  EXPECT_FALSE(CheckStepTimes(Times(-1, 1, 1, 1, 1, 1), "r").ok());
  EXPECT_FALSE(CheckStepTimes(Times(1, 1, 1, 1, 1, std::nan("")), "r").ok());
}

}  // namespace
}  // namespace pstrain
