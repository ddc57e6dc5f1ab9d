#include "scheduler/progress.h"

#include <cctype>
#include <cmath>
#include <string>

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// A strict JSON syntax checker, enough to prove the summary parses.
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& text) : s_(text) {}
  bool Valid() {
    Space();
    if (!Value()) return false;
    Space();
    return i_ == s_.size();
  }

 private:
  void Space() { while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_; }
  bool Lit(const char* word) {
    const std::string w(word);
    if (s_.compare(i_, w.size(), w) != 0) return false;
    i_ += w.size();
    return true;
  }
  bool String() {
    if (s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      if (s_[i_] == '\\') { ++i_; continue; }
      if (static_cast<unsigned char>(s_[i_]) < 0x20) return false;
      if (s_[i_] == '"') { ++i_; return true; }
    }
    return false;
  }
  bool Number() {
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_]))) return false;
    if (s_[i_] == '0' && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1]))) return false;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!std::isdigit(static_cast<unsigned char>(s_[i_]))) return false;
      while (std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (s_[i_] == '+' || s_[i_] == '-') ++i_;
      if (!std::isdigit(static_cast<unsigned char>(s_[i_]))) return false;
      while (std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    return i_ > start;
  }
  bool Value() {
    if (i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{': return Container('}', true);
      case '[': return Container(']', false);
      case '"': return String();
      case 't': return Lit("true");
      case 'f': return Lit("false");
      case 'n': return Lit("null");
      default: return Number();
    }
  }
  bool Container(char close, bool object) {
    ++i_;
    Space();
    if (i_ < s_.size() && s_[i_] == close) { ++i_; return true; }
    for (;;) {
      Space();
      if (object) {
        if (!String()) return false;
        Space();
        if (i_ >= s_.size() || s_[i_++] != ':') return false;
        Space();
      }
      if (!Value()) return false;
      Space();
      if (i_ >= s_.size()) return false;
      if (s_[i_] == close) { ++i_; return true; }
      if (s_[i_++] != ',') return false;
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

JobSpec Job(int workers, int epochs, Mode mode = SYNC) {
  JobSpec job;
  job.set_num_workers(workers);
  job.set_num_servers(1);
  job.set_epochs(epochs);
  job.set_mode(mode);
  ApplyJobDefaults(&job);
  return job;
}

ProgressReport Train(int rank, int epoch, int64_t step, double loss_sum, int64_t samples, int64_t steps = 1) {
  ProgressReport r;
  r.set_worker_rank(rank);
  r.set_epoch(epoch);
  r.set_step(step);
  r.mutable_train()->set_loss_sum(loss_sum);
  r.mutable_train()->set_samples(samples);
  r.mutable_train()->set_steps(steps);
  return r;
}

ProgressReport Eval(int rank, int epoch, double loss_sum, int64_t correct, int64_t samples, bool done = false) {
  ProgressReport r;
  r.set_worker_rank(rank);
  r.set_epoch(epoch);
  r.mutable_eval()->set_loss_sum(loss_sum);
  r.mutable_eval()->set_correct(correct);
  r.mutable_eval()->set_samples(samples);
  r.set_done(done);
  return r;
}

TEST(ProgressTest, EpochCompletesWhenEveryWorkerReportedItsEval) {
  Progress p({Job(2, 2), 10, kT0});
  p.Start(kT0);
  ASSERT_TRUE(p.Add(Train(0, 0, 5, 10.0, 100), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(Train(1, 0, 5, 30.0, 100), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(Eval(0, 0, 5.0, 40, 50), kT0 + absl::Seconds(2)).ok());
  EXPECT_EQ(p.Status(kT0 + absl::Seconds(2)).epochs_done_size(), 0);
  ASSERT_TRUE(p.Add(Eval(1, 0, 15.0, 30, 50), kT0 + absl::Seconds(4)).ok());

  const JobStatus status = p.Status(kT0 + absl::Seconds(4));
  ASSERT_EQ(status.epochs_done_size(), 1);
  const EpochSummary& e = status.epochs_done(0);
  EXPECT_EQ(e.epoch(), 0);
  EXPECT_DOUBLE_EQ(e.train_loss(), 0.2);  // (10 + 30) / 200
  EXPECT_DOUBLE_EQ(e.test_loss(), 0.2);   // (5 + 15) / 100
  EXPECT_DOUBLE_EQ(e.test_accuracy(), 0.7);
  EXPECT_EQ(e.samples(), 200);
  EXPECT_DOUBLE_EQ(e.seconds(), 4.0);
  EXPECT_EQ(status.epochs(), 2);
  EXPECT_EQ(status.step(), 5);
  EXPECT_EQ(status.total_steps(), 10);
  EXPECT_DOUBLE_EQ(status.samples_per_second(), 50.0);  // 200 samples in 4 s
  EXPECT_DOUBLE_EQ(status.eta_seconds(), 4.0);          // 5 of 10 steps in 4 s
  EXPECT_DOUBLE_EQ(status.recent_loss(), 0.2);
  EXPECT_FALSE(p.finished());
}

TEST(ProgressTest, TrainLossIsTheSampleWeightedMean) {
  Progress p({Job(2, 1), 10, kT0});
  ASSERT_TRUE(p.Add(Train(0, 0, 1, 2.0, 10), kT0).ok());   // mean 0.2 over 10
  ASSERT_TRUE(p.Add(Train(1, 0, 1, 90.0, 90), kT0).ok());  // mean 1.0 over 90
  ASSERT_TRUE(p.Add(Eval(0, 0, 0, 0, 0), kT0).ok());
  ASSERT_TRUE(p.Add(Eval(1, 0, 0, 0, 0), kT0).ok());
  const JobStatus status = p.Status(kT0);
  ASSERT_EQ(status.epochs_done_size(), 1);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).train_loss(), 0.92);
  // Evaluated on no samples: not evaluated.
  EXPECT_TRUE(std::isnan(status.epochs_done(0).test_accuracy()));
  EXPECT_FALSE(p.final_test_accuracy().has_value());
}

TEST(ProgressTest, EpochSecondsRunFromThePreviousEpochsEnd) {
  Progress p({Job(1, 2), 10, kT0});
  p.Start(kT0 + absl::Seconds(1));
  ASSERT_TRUE(p.Add(Eval(0, 0, 1, 1, 2), kT0 + absl::Seconds(4)).ok());
  ASSERT_TRUE(p.Add(Eval(0, 1, 1, 2, 2), kT0 + absl::Seconds(9)).ok());
  const JobStatus status = p.Status(kT0 + absl::Seconds(9));
  ASSERT_EQ(status.epochs_done_size(), 2);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).seconds(), 3.0);
  EXPECT_DOUBLE_EQ(status.epochs_done(1).seconds(), 5.0);
  EXPECT_DOUBLE_EQ(*p.final_test_accuracy(), 1.0);
  EXPECT_DOUBLE_EQ(*p.final_test_loss(), 0.5);
}

TEST(ProgressTest, JobFinishesWhenEveryWorkerIsDone) {
  Progress p({Job(2, 1), 10, kT0});
  ASSERT_TRUE(p.Add(Eval(0, 0, 1, 1, 1, /*done=*/true), kT0).ok());
  EXPECT_FALSE(p.finished());
  ASSERT_TRUE(p.Add(Eval(0, 0, 1, 1, 1, /*done=*/true), kT0).ok());  // Repeated: still one worker.
  EXPECT_FALSE(p.finished());
  ASSERT_TRUE(p.Add(Eval(1, 0, 1, 1, 1, /*done=*/true), kT0).ok());
  EXPECT_TRUE(p.finished());
}

TEST(ProgressTest, AsyncStepCountsBatchesOfAllWorkers) {
  Progress p({Job(2, 1, ASYNC), 100, kT0});
  ASSERT_TRUE(p.Add(Train(0, 0, 4, 1, 256, 4), kT0).ok());
  ASSERT_TRUE(p.Add(Train(1, 0, 3, 1, 192, 3), kT0).ok());
  EXPECT_EQ(p.Status(kT0).step(), 7);
}

TEST(ProgressTest, RejectsBadReports) {
  Progress p({Job(2, 3), 10, kT0});
  EXPECT_EQ(p.Add(Train(2, 0, 1, 1, 1), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Add(Train(0, 3, 1, 1, 1), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Add(Train(0, 0, 1, 1, -1), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Add(Eval(0, 0, 1, 5, 4), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Status(kT0).step(), 0);
}

TEST(ProgressTest, SummaryJsonParsesAndHoldsTheNumbers) {
  Progress p({Job(2, 2), 10, kT0});
  p.Start(kT0);
  ASSERT_TRUE(p.Add(Train(0, 0, 5, 10.0, 100), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(Train(1, 0, 5, 30.0, 60), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(Eval(0, 0, 5.0, 40, 50), kT0 + absl::Seconds(2)).ok());
  ASSERT_TRUE(p.Add(Eval(1, 0, 15.0, 35, 50), kT0 + absl::Seconds(2)).ok());
  ASSERT_TRUE(p.Add(Train(0, 1, 10, 5.0, 40), kT0 + absl::Seconds(3)).ok());

  const std::string json = p.SummaryJson(RUNNING, "", kT0 + absl::Seconds(4));
  EXPECT_TRUE(JsonChecker(json).Valid()) << json;
  EXPECT_TRUE(Contains(json, "\"final_test_accuracy\": 0.75")) << json;
  EXPECT_TRUE(Contains(json, "\"final_test_loss\": 0.2")) << json;
  EXPECT_TRUE(Contains(json, "{\"epoch\": 0, \"train_loss\": 0.25, \"test_loss\": 0.2, "
                             "\"test_accuracy\": 0.75, \"samples\": 160, \"seconds\": 2"))
      << json;
  // Epoch 1 is not evaluated yet: null, never nan.
  EXPECT_TRUE(Contains(json, "{\"epoch\": 1, \"train_loss\": 0.125, \"test_loss\": null, "
                             "\"test_accuracy\": null"))
      << json;
  EXPECT_FALSE(Contains(json, "nan")) << json;
  EXPECT_TRUE(Contains(json, "\"workers\": [{\"rank\": 0, \"samples\": 140}, {\"rank\": 1, \"samples\": 60}]"))
      << json;
  EXPECT_TRUE(Contains(json, "\"samples_per_second\": 50,")) << json;
  EXPECT_TRUE(Contains(json, "\"wall_seconds\": 4,")) << json;
  EXPECT_TRUE(Contains(json, "\"mode\": \"sync\"")) << json;
  EXPECT_TRUE(Contains(json, "\"job\": {")) << json;
  EXPECT_TRUE(Contains(json, "\"batch_size\":256")) << json;
  EXPECT_TRUE(Contains(json, "\"failure\": null")) << json;
}

TEST(ProgressTest, SummaryJsonOfAFailedJobWithNothingReportedParses) {
  Progress p({Job(2, 2), 10, kT0});
  const std::string json =
      p.SummaryJson(FAILED, "worker 1 at 127.0.0.1:4567 sent no heartbeat for 3.2 s \"x\"\n", kT0);
  EXPECT_TRUE(JsonChecker(json).Valid()) << json;
  EXPECT_TRUE(Contains(json, "\"state\": \"FAILED\"")) << json;
  EXPECT_TRUE(Contains(json, "\"failure\": \"worker 1 at 127.0.0.1:4567 sent no heartbeat for 3.2 s \\\"x\\\"\\n\""))
      << json;
  EXPECT_TRUE(Contains(json, "\"final_test_accuracy\": null")) << json;
  EXPECT_TRUE(Contains(json, "\"epochs\": []")) << json;
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
