#include "launch/progress.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace pstrain {
namespace launch {
namespace {

TEST(FormatDurationTest, SecondsMinutesHours) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(9.4), "9s");
  EXPECT_EQ(FormatDuration(59.6), "1m00s");
  EXPECT_EQ(FormatDuration(83), "1m23s");
  EXPECT_EQ(FormatDuration(3600), "1h00m00s");
  EXPECT_EQ(FormatDuration(7507), "2h05m07s");
}

TEST(FormatDurationTest, UnknownIsDashes) {
  EXPECT_EQ(FormatDuration(-1), "--");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::infinity()), "--");
  EXPECT_EQ(FormatDuration(std::nan("")), "--");
}

TEST(FormatRateTest, SiSuffixes) {
  EXPECT_EQ(FormatRate(0), "0");
  EXPECT_EQ(FormatRate(987.2), "987");
  EXPECT_EQ(FormatRate(999.7), "1.0k");
  EXPECT_EQ(FormatRate(12345), "12.3k");
  EXPECT_EQ(FormatRate(999960), "1.0M");
  EXPECT_EQ(FormatRate(4.56e6), "4.6M");
  EXPECT_EQ(FormatRate(-3), "--");
}

JobStatus Running() {
  JobStatus s;
  s.set_state(RUNNING);
  s.set_epoch(2);
  s.set_epochs(10);
  s.set_step(1234);
  s.set_total_steps(4690);
  s.set_recent_loss(0.43214);
  s.set_samples_per_second(12345);
  s.set_eta_seconds(83);
  return s;
}

TEST(FormatProgressLineTest, RunningJob) {
  EXPECT_EQ(FormatProgressLine(Running(), 2, 2), "epoch 3/10  step 1234/4690  loss 0.4321  12.3k samples/s  ETA 1m23s");
}

TEST(FormatProgressLineTest, BeforeTheFirstStepShowsNoLoss) {
  JobStatus s = Running();
  s.set_epoch(0);
  s.set_step(0);
  EXPECT_EQ(FormatProgressLine(s, 2, 2), "epoch 1/10  step 0/4690");
}

TEST(FormatProgressLineTest, WaitingForRoles) {
  JobStatus s;
  s.set_state(WAITING_FOR_ROLES);
  s.set_registered_servers(1);
  EXPECT_EQ(FormatProgressLine(s, 2, 3), "waiting for roles: servers 1/2  workers 0/3");
}

TEST(FormatProgressLineTest, EndedJob) {
  JobStatus s;
  s.set_state(FINISHED);
  EXPECT_EQ(FormatProgressLine(s, 2, 2), "job finished");
  s.set_state(FAILED);
  s.set_failure("worker 1 missed heartbeats");
  EXPECT_EQ(FormatProgressLine(s, 2, 2), "job failed: worker 1 missed heartbeats");
}

EpochSummary Epoch(int epoch, double acc, int64_t samples, double seconds) {
  EpochSummary e;
  e.set_epoch(epoch);
  e.set_train_loss(0.31214);
  e.set_test_loss(0.33436);
  e.set_test_accuracy(acc);
  e.set_samples(samples);
  e.set_seconds(seconds);
  return e;
}

TEST(FormatEpochLineTest, OneBasedEpochAndFourDecimals) {
  EXPECT_EQ(FormatEpochLine(Epoch(2, 0.88123, 60000, 9.71), 10),
            "epoch 3/10 done: train_loss 0.3121  test_loss 0.3344  test_acc 0.8812  9.7 s");
}

TEST(FormatEpochLineTest, TestAucWhenTheWorkersReportedScores) {
  EpochSummary e = Epoch(2, 0.88123, 60000, 9.71);
  e.set_test_auc(0.78934);
  e.set_test_auc_error_bound(2e-5);
  EXPECT_EQ(FormatEpochLine(e, 10),
            "epoch 3/10 done: train_loss 0.3121  test_loss 0.3344  test_acc 0.8812  test_auc 0.7893  9.7 s");
}

TEST(FormatFinalResultTest, LastAccuracyAndOverallRate) {
  JobStatus s = Running();
  *s.add_epochs_done() = Epoch(0, 0.80, 60000, 5.0);
  *s.add_epochs_done() = Epoch(1, 0.85, 60000, 7.0);
  EXPECT_EQ(FormatFinalResult(s, 83.2, "/tmp/x/summary.json"),
            "final test_acc 0.8500  10.0k samples/s  wall 1m23s  summary /tmp/x/summary.json");
}

TEST(FormatFinalResultTest, LastTestAucWhenTheWorkersReportedScores) {
  JobStatus s = Running();
  *s.add_epochs_done() = Epoch(0, 0.80, 60000, 5.0);
  s.mutable_epochs_done(0)->set_test_auc(0.75);
  EXPECT_EQ(FormatFinalResult(s, 5, ""), "final test_acc 0.8000  test_auc 0.7500  12.0k samples/s  wall 5s");
}

TEST(FormatFinalResultTest, ProgressiveAucWithoutATestSet) {
  JobStatus s = Running();
  EpochSummary e = Epoch(0, std::nan(""), 60000, 5.0);
  e.set_train_auc(0.81423);
  *s.add_epochs_done() = e;
  EXPECT_EQ(FormatFinalResult(s, 5, ""), "final test_acc n/a  progressive_auc 0.8142  12.0k samples/s  wall 5s");
  EXPECT_EQ(FormatEpochLine(e, 1), "epoch 1/1 done: train_loss 0.3121  progressive_auc 0.8142  5.0 s");
}

TEST(FormatFinalResultTest, WithoutEpochsOrSummary) {
  JobStatus s = Running();
  EXPECT_EQ(FormatFinalResult(s, 5, ""), "final test_acc n/a  12.3k samples/s  wall 5s");
}

TEST(FormatFinalResultTest, NoStatusAtAll) {
  EXPECT_EQ(FormatFinalResult(JobStatus(), 1.2, ""), "final test_acc n/a  -- samples/s  wall 1s");
}

}  // namespace
}  // namespace launch
}  // namespace pstrain
