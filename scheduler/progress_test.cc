#include "scheduler/progress.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "data/score_histogram.h"
#include "data/score_histogram_proto.h"
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
  void Space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Lit(const char* word) {
    const std::string w(word);
    if (s_.compare(i_, w.size(), w) != 0) return false;
    i_ += w.size();
    return true;
  }
  bool String() {
    if (s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      if (s_[i_] == '\\') {
        ++i_;
        continue;
      }
      if (static_cast<unsigned char>(s_[i_]) < 0x20) return false;
      if (s_[i_] == '"') {
        ++i_;
        return true;
      }
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
      case '{':
        return Container('}', true);
      case '[':
        return Container(']', false);
      case '"':
        return String();
      case 't':
        return Lit("true");
      case 'f':
        return Lit("false");
      case 'n':
        return Lit("null");
      default:
        return Number();
    }
  }
  bool Container(char close, bool object) {
    ++i_;
    Space();
    if (i_ < s_.size() && s_[i_] == close) {
      ++i_;
      return true;
    }
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
      if (s_[i_] == close) {
        ++i_;
        return true;
      }
      if (s_[i_++] != ',') return false;
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

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

// Options of a job with `test_samples` test samples.
Progress::Options Opts(const JobSpec& job, int64_t total_steps, int64_t test_samples) {
  return Progress::Options{job, total_steps, kT0, test_samples};
}

// Leases the free evaluation leases of `epoch` to the workers in `ranks` in turn, each reporting at
// `now` with `correct` right answers per lease and a loss of 0.2 per sample, until the pool answers
// wait or epoch_done. Returns the number of leases evaluated.
int EvaluateEpoch(Progress* p, int epoch, const std::vector<int>& ranks, int64_t correct, absl::Time now) {
  int leases = 0;
  for (int i = 0;; ++i) {
    const int rank = ranks[i % ranks.size()];
    absl::StatusOr<EvalLease> lease = p->LeaseEval(rank, epoch, now);
    EXPECT_TRUE(lease.ok()) << lease.status();
    if (!lease.ok() || lease->epoch_done || lease->wait) return leases;
    ProgressReport r;
    r.set_worker_rank(rank);
    r.set_epoch(epoch);
    EvalStats* e = r.add_evals();
    e->set_lease_id(lease->id);
    e->set_samples(lease->end - lease->begin);
    e->set_correct(correct);
    e->set_loss_sum(0.2 * static_cast<double>(lease->end - lease->begin));
    EXPECT_TRUE(p->Add(r, now).ok());
    ++leases;
  }
}

// A CTR model's evaluation report of `lease`: test sample i predicted (i + 1) / 100, each in a bin
// of its own, clicked as `clicked` says; loss 0.2 per sample.
ProgressReport ScoredReport(int rank, const EvalLease& lease, const std::function<bool(int64_t)>& clicked) {
  ProgressReport r;
  r.set_worker_rank(rank);
  r.set_epoch(lease.epoch);
  EvalStats* e = r.add_evals();
  e->set_lease_id(lease.id);
  e->set_samples(lease.end - lease.begin);
  e->set_loss_sum(0.2 * static_cast<double>(lease.end - lease.begin));
  data::ScoreHistogram h;
  for (int64_t i = lease.begin; i < lease.end; ++i) EXPECT_TRUE(h.Add((i + 1) / 100.0, clicked(i)).ok());
  *e->mutable_scores() = data::ScoreHistogramToProto(h);
  return r;
}

// EvaluateEpoch for a CTR model: every lease of `epoch` reported by `ranks` in turn, with scores.
int ScoreEpoch(Progress* p, int epoch, const std::vector<int>& ranks, const std::function<bool(int64_t)>& clicked,
               absl::Time now) {
  int leases = 0;
  for (int i = 0;; ++i) {
    const int rank = ranks[i % ranks.size()];
    absl::StatusOr<EvalLease> lease = p->LeaseEval(rank, epoch, now);
    EXPECT_TRUE(lease.ok()) << lease.status();
    if (!lease.ok() || lease->epoch_done || lease->wait) return leases;
    EXPECT_TRUE(p->Add(ScoredReport(rank, *lease, clicked), now).ok());
    ++leases;
  }
}

ProgressReport Done(int rank, int epoch) {
  ProgressReport r;
  r.set_worker_rank(rank);
  r.set_epoch(epoch);
  r.set_done(true);
  return r;
}

TEST(ProgressTest, EpochCompletesWhenEveryEvaluationLeaseIsReported) {
  Progress p(Opts(Job(2, 2), 10, 80));  // Leases of ceil(80 / 8) = 10 test samples.
  p.Start(kT0);
  ASSERT_TRUE(p.Add(Train(0, 0, 5, 10.0, 100), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(Train(1, 0, 5, 30.0, 100), kT0 + absl::Seconds(1)).ok());
  // Worker 0 takes one lease and reports it; worker 1 holds one unreported.
  absl::StatusOr<EvalLease> held = p.LeaseEval(1, 0, kT0 + absl::Seconds(2));
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->end - held->begin, 10);
  EXPECT_EQ(EvaluateEpoch(&p, 0, {0}, 7, kT0 + absl::Seconds(2)), 7);  // Then waits: one is out.
  EXPECT_TRUE(p.LeaseEval(0, 0, kT0 + absl::Seconds(2))->wait);
  EXPECT_EQ(p.Status(kT0 + absl::Seconds(2)).epochs_done_size(), 0);
  ProgressReport last;
  last.set_worker_rank(1);
  EvalStats* e = last.add_evals();
  e->set_lease_id(held->id);
  e->set_samples(10);
  e->set_correct(7);
  e->set_loss_sum(2.0);
  ASSERT_TRUE(p.Add(last, kT0 + absl::Seconds(4)).ok());

  const JobStatus status = p.Status(kT0 + absl::Seconds(4));
  ASSERT_EQ(status.epochs_done_size(), 1);
  const EpochSummary& s = status.epochs_done(0);
  EXPECT_EQ(s.epoch(), 0);
  EXPECT_DOUBLE_EQ(s.train_loss(), 0.2);  // (10 + 30) / 200
  EXPECT_DOUBLE_EQ(s.test_loss(), 0.2);   // 0.2 per sample
  EXPECT_DOUBLE_EQ(s.test_accuracy(), 0.7);
  EXPECT_EQ(s.samples(), 200);
  EXPECT_DOUBLE_EQ(s.seconds(), 4.0);
  EXPECT_EQ(status.epochs(), 2);
  EXPECT_EQ(status.step(), 5);
  EXPECT_EQ(status.total_steps(), 10);
  EXPECT_DOUBLE_EQ(status.samples_per_second(), 50.0);  // 200 samples in 4 s
  EXPECT_DOUBLE_EQ(status.eta_seconds(), 4.0);          // 5 of 10 steps in 4 s
  EXPECT_DOUBLE_EQ(status.recent_loss(), 0.2);
  EXPECT_TRUE(p.LeaseEval(0, 0, kT0 + absl::Seconds(4))->epoch_done);
  EXPECT_FALSE(p.finished());
}

TEST(ProgressTest, EvaluationOfADeadWorkersLeaseIsRedoneAndCountedOnce) {
  Progress p(Opts(Job(2, 1), 10, 80));
  const EvalLease lost = *p.LeaseEval(1, 0, kT0);
  EXPECT_EQ(p.WorkerGone(1), 1);
  // Worker 0 evaluates everything, the lost lease included.
  EXPECT_EQ(EvaluateEpoch(&p, 0, {0}, 10, kT0), 8);
  // A late report of the lost lease by its old holder does not count twice.
  ProgressReport late;
  late.set_worker_rank(1);
  EvalStats* e = late.add_evals();
  e->set_lease_id(lost.id);
  e->set_samples(10);
  e->set_correct(0);
  ASSERT_TRUE(p.Add(late, kT0).ok());
  const JobStatus status = p.Status(kT0);
  ASSERT_EQ(status.epochs_done_size(), 1);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).test_accuracy(), 1.0);
  EXPECT_DOUBLE_EQ(*p.final_test_accuracy(), 1.0);
}

TEST(ProgressTest, TrainLossIsTheSampleWeightedMean) {
  Progress p(Opts(Job(2, 1), 10, 0));
  ASSERT_TRUE(p.Add(Train(0, 0, 1, 2.0, 10), kT0).ok());   // mean 0.2 over 10
  ASSERT_TRUE(p.Add(Train(1, 0, 1, 90.0, 90), kT0).ok());  // mean 1.0 over 90
  // No test samples: the epoch's evaluation is complete at once, with no numbers.
  EXPECT_TRUE(p.LeaseEval(0, 0, kT0)->epoch_done);
  const JobStatus status = p.Status(kT0);
  ASSERT_EQ(status.epochs_done_size(), 1);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).train_loss(), 0.92);
  EXPECT_TRUE(std::isnan(status.epochs_done(0).test_accuracy()));
  EXPECT_FALSE(p.final_test_accuracy().has_value());
}

TEST(ProgressTest, SyncStepsPastTheJobsAreRefused) {
  Progress::Options options = Opts(Job(2, 1), 10, 0);
  options.train_samples = 640;
  options.global_batch = 64;  // 10 steps in the one epoch
  Progress p(options);
  ASSERT_TRUE(p.Add(Train(0, 0, 10, 2.0, 320, 10), kT0).ok());
  absl::Status past = p.Add(Train(1, 0, 1000, 2.0, 32, 1000), kT0);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument) << past;
  EXPECT_EQ(past.message(), "progress report from worker 1: step 1000 is past the job's 10 steps");
  EXPECT_EQ(p.Add(Train(1, 0, 3, 2.0, 32, 5), kT0).code(), absl::StatusCode::kInvalidArgument);  // 5 steps to step 3
  // After a rollback (a server's recovery) a worker redoes steps it had not reported: 5 steps done
  // by step 3 may be 2 before the rollback and 3 after.
  p.AllowRedo();
  EXPECT_TRUE(p.Add(Train(1, 0, 3, 2.0, 32, 5), kT0).ok());
  const absl::Status too_many = p.Add(Train(1, 0, 4, 2.0, 32, 15), kT0);
  EXPECT_EQ(too_many.message(),
            "progress report from worker 1: 15 steps done by step 4, expected at most 14 (with its redone steps)");
}

TEST(ProgressTest, EpochSecondsRunFromThePreviousEpochsEnd) {
  Progress p(Opts(Job(1, 2), 10, 8));
  p.Start(kT0 + absl::Seconds(1));
  EXPECT_EQ(EvaluateEpoch(&p, 0, {0}, 1, kT0 + absl::Seconds(4)), 4);  // Leases of 2; 1 of 2 right.
  EXPECT_EQ(EvaluateEpoch(&p, 1, {0}, 2, kT0 + absl::Seconds(9)), 4);
  const JobStatus status = p.Status(kT0 + absl::Seconds(9));
  ASSERT_EQ(status.epochs_done_size(), 2);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).seconds(), 3.0);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).test_accuracy(), 0.5);
  EXPECT_DOUBLE_EQ(status.epochs_done(1).seconds(), 5.0);
  EXPECT_DOUBLE_EQ(*p.final_test_accuracy(), 1.0);
  EXPECT_DOUBLE_EQ(*p.final_test_loss(), 0.2);
}

TEST(ProgressTest, AnUnevaluatedEpochCompletesWhenTheNextOneStarts) {
  JobSpec job = Job(1, 3);
  job.set_eval_last_epoch_only(true);
  Progress p(Opts(job, 30, 8));
  p.Start(kT0);
  ASSERT_TRUE(p.Add(Train(0, 0, 10, 5.0, 50), kT0 + absl::Seconds(2)).ok());
  EXPECT_EQ(p.Status(kT0 + absl::Seconds(2)).epochs_done_size(), 0);
  ASSERT_TRUE(p.Add(Train(0, 1, 20, 5.0, 50), kT0 + absl::Seconds(3)).ok());
  JobStatus status = p.Status(kT0 + absl::Seconds(3));
  ASSERT_EQ(status.epochs_done_size(), 1);
  EXPECT_DOUBLE_EQ(status.epochs_done(0).seconds(), 3.0);
  EXPECT_TRUE(std::isnan(status.epochs_done(0).test_accuracy()));
  EXPECT_EQ(status.epochs_done(0).samples(), 50);
  // A late request to evaluate that epoch finds it closed.
  EXPECT_TRUE(p.LeaseEval(0, 0, kT0 + absl::Seconds(3))->epoch_done);
  // The last epoch is evaluated; epoch 1 closes when its evaluation is asked for.
  ASSERT_TRUE(p.Add(Train(0, 2, 30, 5.0, 50), kT0 + absl::Seconds(4)).ok());
  EXPECT_EQ(EvaluateEpoch(&p, 2, {0}, 2, kT0 + absl::Seconds(5)), 4);
  ASSERT_TRUE(p.Add(Done(0, 2), kT0 + absl::Seconds(5)).ok());
  EXPECT_TRUE(p.TryFinish({0}, kT0 + absl::Seconds(5)));
  status = p.Status(kT0 + absl::Seconds(5));
  ASSERT_EQ(status.epochs_done_size(), 3);
  EXPECT_TRUE(std::isnan(status.epochs_done(1).test_accuracy()));
  EXPECT_DOUBLE_EQ(status.epochs_done(2).test_accuracy(), 1.0);
}

TEST(ProgressTest, UnevaluatedLastEpochCompletesWhenTheJobFinishes) {
  JobSpec job = Job(1, 1);
  Progress p(Opts(job, 10, 8));
  ASSERT_TRUE(p.Add(Train(0, 0, 10, 5.0, 50), kT0).ok());
  ASSERT_TRUE(p.Add(Done(0, 0), kT0 + absl::Seconds(1)).ok());
  EXPECT_EQ(p.Status(kT0).epochs_done_size(), 0);
  EXPECT_TRUE(p.TryFinish({0}, kT0 + absl::Seconds(1)));
  EXPECT_EQ(p.Status(kT0 + absl::Seconds(1)).epochs_done_size(), 1);
}

TEST(ProgressTest, JobFinishesWhenEveryLiveWorkerIsDone) {
  Progress p(Opts(Job(3, 1), 10, 8));
  ASSERT_TRUE(p.Add(Done(0, 0), kT0).ok());
  EXPECT_FALSE(p.TryFinish({0, 1, 2}, kT0));
  ASSERT_TRUE(p.Add(Done(0, 0), kT0).ok());  // Repeated: still one worker.
  EXPECT_FALSE(p.TryFinish({0, 1, 2}, kT0));
  ASSERT_TRUE(p.Add(Done(1, 0), kT0).ok());
  EXPECT_FALSE(p.TryFinish({0, 1, 2}, kT0));
  EXPECT_FALSE(p.TryFinish({}, kT0));  // Nobody live: never finished.
  // Worker 2 died: the live ones are all done.
  p.WorkerGone(2);
  EXPECT_TRUE(p.TryFinish({0, 1}, kT0 + absl::Seconds(1)));
  EXPECT_TRUE(p.finished());
}

TEST(ProgressTest, NotFinishedWhileAnEvaluationLeaseIsOut) {
  Progress p(Opts(Job(2, 1), 10, 16));  // Leases of 2.
  const EvalLease held = *p.LeaseEval(1, 0, kT0);
  ASSERT_TRUE(p.Add(Done(0, 0), kT0).ok());
  ASSERT_TRUE(p.Add(Done(1, 0), kT0).ok());
  EXPECT_FALSE(p.TryFinish({0, 1}, kT0));
  // Worker 1 dies holding it: its done no longer counts, and the lease goes back to the pool.
  EXPECT_EQ(p.WorkerGone(1), 1);
  EXPECT_FALSE(p.TryFinish({0}, kT0));
  EXPECT_EQ(EvaluateEpoch(&p, 0, {0}, 2, kT0), 8);
  EXPECT_TRUE(p.TryFinish({0}, kT0));
  EXPECT_EQ(held.end - held.begin, 2);
}

TEST(ProgressTest, DoneOfARankIsForgottenWhenItsWorkerIsGone) {
  Progress p(Opts(Job(2, 1), 10, 0));
  ASSERT_TRUE(p.Add(Done(1, 0), kT0).ok());
  p.WorkerGone(1);
  // A new worker took rank 1 and is not done yet.
  ASSERT_TRUE(p.Add(Done(0, 0), kT0).ok());
  EXPECT_FALSE(p.TryFinish({0, 1}, kT0));
}

TEST(ProgressTest, AsyncStepCountsBatchesOfAllWorkers) {
  Progress p(Opts(Job(2, 1, ASYNC), 100, 0));
  ASSERT_TRUE(p.Add(Train(0, 0, 4, 1, 256, 4), kT0).ok());
  ASSERT_TRUE(p.Add(Train(1, 0, 3, 1, 192, 3), kT0).ok());
  EXPECT_EQ(p.Status(kT0).step(), 7);
}

TEST(ProgressTest, AsyncEpochSamplesAreTheCompleteLeasesEachCountedOnce) {
  Progress p(Opts(Job(2, 2, ASYNC), 100, 0));
  // Worker 1 trained 30 samples it never reported before dying; worker 0 finished its lease.
  ASSERT_TRUE(p.Add(Train(0, 0, 4, 8.0, 40, 4), kT0).ok());
  ASSERT_TRUE(p.Add(Train(1, 0, 1, 4.0, 10, 1), kT0).ok());
  p.CountLease(/*lease_id=*/1, /*epoch=*/0, 40);
  p.CountLease(2, 0, 40);  // Completed by whoever took over worker 1's remainder.
  p.CountLease(2, 0, 40);  // A repeat changes nothing.
  p.CountLease(3, 0, 20);
  p.CountLease(4, 1, 40);
  const std::string json = p.SummaryJson(RUNNING, "", kT0);
  EXPECT_TRUE(Contains(json,
                       "{\"epoch\": 0, \"train_loss\": 0.24, \"test_loss\": null, "
                       "\"test_accuracy\": null, \"samples\": 100,"))
      << json;
  EXPECT_TRUE(Contains(json,
                       "{\"epoch\": 1, \"train_loss\": null, \"test_loss\": null, "
                       "\"test_accuracy\": null, \"samples\": 40,"))
      << json;
  // The per-worker numbers stay what the workers reported.
  EXPECT_TRUE(Contains(json, "\"workers\": [{\"rank\": 0, \"samples\": 40, ")) << json;
  EXPECT_TRUE(Contains(json, "}}, {\"rank\": 1, \"samples\": 10, ")) << json;
}

TEST(ProgressTest, RejectsBadReports) {
  Progress p(Opts(Job(2, 3), 10, 8));
  EXPECT_EQ(p.Add(Train(-1, 0, 1, 1, 1), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Add(Train(0, 3, 1, 1, 1), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Add(Train(0, 0, 1, 1, -1), kT0).code(), absl::StatusCode::kInvalidArgument);
  ProgressReport bad_eval = Train(0, 0, 1, 1, 1);
  bad_eval.add_evals()->set_lease_id(1);  // No lease was handed out.
  EXPECT_EQ(p.Add(bad_eval, kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.LeaseEval(0, 3, kT0).status().code(), absl::StatusCode::kOutOfRange);
  // Nothing was recorded.
  EXPECT_EQ(p.Status(kT0).step(), 0);
  EXPECT_DOUBLE_EQ(p.samples_per_second(kT0 + absl::Seconds(1)), 0);
}

TEST(ProgressTest, SummaryJsonParsesAndHoldsTheNumbers) {
  Progress p(Opts(Job(2, 2), 10, 32));  // Leases of 4 test samples.
  p.Start(kT0);
  ASSERT_TRUE(p.Add(Train(0, 0, 5, 10.0, 100), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(Train(1, 0, 5, 30.0, 60), kT0 + absl::Seconds(1)).ok());
  EXPECT_EQ(EvaluateEpoch(&p, 0, {0, 1}, 3, kT0 + absl::Seconds(2)), 8);
  ASSERT_TRUE(p.Add(Train(0, 1, 10, 5.0, 40), kT0 + absl::Seconds(3)).ok());
  // A worker that joined later reports under its own rank.
  ASSERT_TRUE(p.Add(Train(2, 1, 10, 1.0, 8), kT0 + absl::Seconds(3)).ok());

  const std::vector<MembershipEvent> events = {{kT0 + absl::Milliseconds(2500), WORKER, 1, ChangeKind::kDied, 6},
                                               {kT0 + absl::Seconds(3), WORKER, 2, ChangeKind::kJoined, 7}};
  const std::string json = p.SummaryJson(RUNNING, "", kT0 + absl::Seconds(4), events, {0, 2});
  EXPECT_TRUE(JsonChecker(json).Valid()) << json;
  EXPECT_TRUE(Contains(json, "\"final_test_accuracy\": 0.75")) << json;
  EXPECT_TRUE(Contains(json, "\"final_test_loss\": 0.2")) << json;
  EXPECT_TRUE(Contains(json,
                       "{\"epoch\": 0, \"train_loss\": 0.25, \"test_loss\": 0.2, "
                       "\"test_accuracy\": 0.75, \"samples\": 160, \"seconds\": 2"))
      << json;
  // Epoch 1 is not evaluated yet: null, never nan.
  EXPECT_TRUE(Contains(json,
                       "{\"epoch\": 1, \"train_loss\": 0.125, \"test_loss\": null, "
                       "\"test_accuracy\": null, \"samples\": 48"))
      << json;
  EXPECT_FALSE(Contains(json, "nan")) << json;
  EXPECT_TRUE(Contains(json, "\"workers\": [{\"rank\": 0, \"samples\": 140, "));
  EXPECT_TRUE(Contains(json, "}}, {\"rank\": 1, \"samples\": 60, "));
  EXPECT_TRUE(Contains(json, "}}, {\"rank\": 2, \"samples\": 8, ")) << json;
  EXPECT_TRUE(Contains(json,
                       "\"membership_events\": [{\"seconds\": 2.5, \"role\": \"worker\", \"rank\": 1, "
                       "\"kind\": \"died\"}, {\"seconds\": 3, \"role\": \"worker\", \"rank\": 2, "
                       "\"kind\": \"joined\"}],"))
      << json;
  EXPECT_TRUE(Contains(json, "\"live_workers\": [0, 2],")) << json;
  EXPECT_TRUE(Contains(json, "\"samples_per_second\": 52,")) << json;
  EXPECT_TRUE(Contains(json, "\"wall_seconds\": 4,")) << json;
  EXPECT_TRUE(Contains(json, "\"mode\": \"sync\"")) << json;
  EXPECT_TRUE(Contains(json, "\"job\": {")) << json;
  EXPECT_TRUE(Contains(json, "\"batch_size\":256")) << json;
  EXPECT_TRUE(Contains(json, "\"failure\": null")) << json;
  // Workers that report no scores (image models): no AUC members at all.
  EXPECT_FALSE(Contains(json, "auc")) << json;
  EXPECT_FALSE(Contains(json, "logloss")) << json;
}

TEST(ProgressTest, ScoresOfAnEpochsLeasesGiveItsTestAucAndTheSummarysAucMembers) {
  Progress p(Opts(Job(2, 3), 10, 32));  // Leases of 4 test samples: 8 per epoch.
  p.Start(kT0);
  ASSERT_TRUE(p.Add(Train(0, 0, 5, 10.0, 100), kT0 + absl::Seconds(1)).ok());
  // Epoch 0: odd samples clicked. The positive 2k + 1 outranks k + 1 negatives: 136 of 256 pairs.
  EXPECT_EQ(ScoreEpoch(
                &p, 0, {0, 1}, [](int64_t i) { return i % 2 == 1; }, kT0 + absl::Seconds(2)),
            8);
  // Epoch 1: the upper half clicked, ranked perfectly.
  EXPECT_EQ(ScoreEpoch(
                &p, 1, {1, 0}, [](int64_t i) { return i >= 16; }, kT0 + absl::Seconds(3)),
            8);
  ASSERT_TRUE(p.Add(Train(0, 2, 15, 5.0, 40), kT0 + absl::Seconds(4)).ok());

  const JobStatus status = p.Status(kT0 + absl::Seconds(4));
  ASSERT_EQ(status.epochs_done_size(), 2);
  ASSERT_TRUE(status.epochs_done(0).has_test_auc());
  EXPECT_DOUBLE_EQ(status.epochs_done(0).test_auc(), 136.0 / 256);
  EXPECT_EQ(status.epochs_done(0).test_auc_error_bound(), 0);  // One prediction per bin.
  EXPECT_DOUBLE_EQ(status.epochs_done(1).test_auc(), 1.0);
  const std::optional<Progress::FinalAuc> final_auc = p.final_test_auc();
  ASSERT_TRUE(final_auc.has_value());
  EXPECT_DOUBLE_EQ(final_auc->auc, 1.0);
  EXPECT_DOUBLE_EQ(final_auc->logloss, 0.2);

  const std::string json = p.SummaryJson(RUNNING, "", kT0 + absl::Seconds(4));
  EXPECT_TRUE(JsonChecker(json).Valid()) << json;
  EXPECT_TRUE(Contains(json,
                       "\"final_test_auc\": 1,\n  \"final_test_auc_error_bound\": 0,\n"
                       "  \"final_test_logloss\": 0.2,\n"))
      << json;
  EXPECT_TRUE(Contains(json,
                       "{\"epoch\": 0, \"train_loss\": 0.1, \"test_loss\": 0.2, \"test_accuracy\": 0, "
                       "\"test_auc\": 0.53125, \"test_auc_error_bound\": 0, \"samples\": 100"))
      << json;
  EXPECT_TRUE(Contains(json, "\"test_auc\": 1, \"test_auc_error_bound\": 0, \"samples\"")) << json;
  // Epoch 2 is not evaluated yet: null, like its other test numbers.
  EXPECT_TRUE(Contains(json, "\"test_accuracy\": null, \"test_auc\": null, \"test_auc_error_bound\": null")) << json;
}

TEST(ProgressTest, AReportWithBadScoresIsRefusedAndRecordsNothing) {
  Progress p(Opts(Job(1, 1), 10, 8));  // Leases of 2.
  const EvalLease lease = *p.LeaseEval(0, 0, kT0);
  ProgressReport bad = ScoredReport(0, lease, [](int64_t i) { return i == 0; });
  bad.mutable_train()->set_samples(10);
  bad.mutable_train()->set_steps(1);
  bad.set_step(1);
  bad.mutable_evals(0)->mutable_scores()->set_bins(1, 65536);
  absl::Status s = p.Add(bad, kT0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "evaluation report from worker 0 for lease 1: score histogram: entry 1 is bin 65536, expected a bin "
            "below 65536");
  bad.mutable_evals(0)->mutable_scores()->set_bins(1, 7);
  bad.mutable_evals(0)->mutable_scores()->mutable_bins()->RemoveLast();
  EXPECT_EQ(p.Add(bad, kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Status(kT0).step(), 0);
  // The lease is still unreported: its good results count, and once.
  ASSERT_TRUE(p.Add(ScoredReport(0, lease, [](int64_t i) { return i == 0; }), kT0).ok());
  EXPECT_EQ(ScoreEpoch(
                &p, 0, {0}, [](int64_t i) { return i < 4; }, kT0),
            3);
  const JobStatus status = p.Status(kT0);
  ASSERT_EQ(status.epochs_done_size(), 1);
  // Samples 0..7, clicked 0, 2 and 3: of the 3 x 5 pairs, only 2 and 3 outrank a negative (1).
  EXPECT_DOUBLE_EQ(status.epochs_done(0).test_auc(), 2.0 / 15);
}

TEST(ProgressTest, TrainingScoresOfTheReportsGiveTheEpochsProgressiveAuc) {
  Progress p(Opts(Job(2, 1), 10, 0));
  // Two workers' steps: predictions (i + 1) / 100 of samples 0..9 and 10..19, the odd ones clicked.
  for (int rank = 0; rank < 2; ++rank) {
    ProgressReport r = Train(rank, 0, 1, 2.0, 10);
    data::ScoreHistogram h;
    for (int64_t i = 10 * rank; i < 10 * rank + 10; ++i) ASSERT_TRUE(h.Add((i + 1) / 100.0, i % 2 == 1).ok());
    *r.mutable_train()->mutable_scores() = data::ScoreHistogramToProto(h);
    ASSERT_TRUE(p.Add(r, kT0).ok());
  }
  EXPECT_TRUE(p.LeaseEval(0, 0, kT0)->epoch_done);
  // Odd i = 2k + 1 outranks the k + 1 even ones below it: 55 of the 100 pairs.
  const JobStatus status = p.Status(kT0);
  ASSERT_EQ(status.epochs_done_size(), 1);
  ASSERT_TRUE(status.epochs_done(0).has_train_auc());
  EXPECT_DOUBLE_EQ(status.epochs_done(0).train_auc(), 55.0 / 100);
  EXPECT_TRUE(Contains(p.SummaryJson(RUNNING, "", kT0), "\"train_auc\": 0.55, \"samples\": 20"))
      << p.SummaryJson(RUNNING, "", kT0);
  // More predictions than samples, or a bin out of range: refused, nothing counted.
  Progress q(Opts(Job(2, 1), 10, 0));
  ProgressReport bad = Train(0, 0, 1, 2.0, 3);
  data::ScoreHistogram h;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(h.Add(0.5, true).ok());
  *bad.mutable_train()->mutable_scores() = data::ScoreHistogramToProto(h);
  const absl::Status s = q.Add(bad, kT0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "progress report from worker 0: training scores: 4 predictions for 3 samples, expected "
            "at most one a sample");
  bad.mutable_train()->mutable_scores()->set_bins(0, 1 << 20);
  EXPECT_EQ(q.Add(bad, kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q.Status(kT0).step(), 0);
}

TEST(ProgressTest, SummaryJsonOfAFailedJobWithNothingReportedParses) {
  Progress p(Opts(Job(2, 2), 10, 8));
  const std::string json = p.SummaryJson(FAILED, "worker 1 at 127.0.0.1:4567 sent no heartbeat for 3.2 s \"x\"\n", kT0);
  EXPECT_TRUE(JsonChecker(json).Valid()) << json;
  EXPECT_TRUE(Contains(json, "\"state\": \"FAILED\"")) << json;
  EXPECT_TRUE(Contains(json, "\"failure\": \"worker 1 at 127.0.0.1:4567 sent no heartbeat for 3.2 s \\\"x\\\"\\n\""))
      << json;
  EXPECT_TRUE(Contains(json, "\"final_test_accuracy\": null")) << json;
  EXPECT_TRUE(Contains(json, "\"epochs\": []")) << json;
  EXPECT_TRUE(Contains(json, "\"membership_events\": [],")) << json;
  EXPECT_TRUE(Contains(json, "\"live_workers\": [],")) << json;
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain

namespace pstrain {
namespace scheduler {
namespace {

ProgressReport WithTraffic(ProgressReport r, int64_t sent, int64_t received, int64_t saved, int64_t pulls,
                           int64_t staleness_sum, int64_t staleness_max) {
  r.mutable_traffic()->set_bytes_sent(sent);
  r.mutable_traffic()->set_bytes_received(received);
  r.mutable_traffic()->set_compression_saved_bytes(saved);
  r.mutable_staleness()->set_pulls(pulls);
  r.mutable_staleness()->set_sum(staleness_sum);
  r.mutable_staleness()->set_max(staleness_max);
  return r;
}

TEST(ProgressTest, TrafficAndStalenessAddUpPerWorkerAndSurviveARestore) {
  const JobSpec job = Job(2, 1, ASYNC);
  Progress p(Opts(job, 100, 0));
  p.Start(kT0);
  ASSERT_TRUE(p.Add(WithTraffic(Train(0, 0, 1, 1.0, 8), 100, 200, 30, 4, 6, 3), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(WithTraffic(Train(0, 0, 2, 1.0, 8), 50, 20, 5, 2, 0, 0), kT0 + absl::Seconds(2)).ok());
  ASSERT_TRUE(p.Add(Train(1, 0, 1, 1.0, 8), kT0 + absl::Seconds(2)).ok());

  DashboardStatus status;
  p.FillStatus(kT0 + absl::Seconds(4), &status);
  ASSERT_EQ(status.workers.size(), 2u);
  EXPECT_EQ(status.workers[0].bytes_sent, 150);
  EXPECT_EQ(status.workers[0].bytes_received, 220);
  EXPECT_EQ(status.workers[0].compression_saved_bytes, 35);
  EXPECT_EQ(status.workers[0].staleness_pulls, 6);
  EXPECT_DOUBLE_EQ(status.workers[0].staleness_mean, 1.0);
  EXPECT_EQ(status.workers[0].staleness_max, 3);
  EXPECT_EQ(status.workers[0].step, 2);
  EXPECT_DOUBLE_EQ(status.workers[0].samples_per_second, 16.0 / 4);  // 16 samples in 4 s of training
  EXPECT_TRUE(std::isnan(status.workers[1].staleness_mean));         // no pulls

  const std::string json = p.SummaryJson(RUNNING, "", kT0 + absl::Seconds(4));
  EXPECT_TRUE(Contains(json,
                       "{\"rank\": 0, \"samples\": 16, \"bytes_sent\": 150, \"bytes_received\": 220, "
                       "\"compression_saved_bytes\": 35, \"staleness\": {\"pulls\": 6, \"mean\": 1, "
                       "\"max\": 3}}"))
      << json;
  EXPECT_TRUE(Contains(json, "\"staleness\": {\"pulls\": 0, \"mean\": null, \"max\": 0}}")) << json;
  EXPECT_TRUE(JsonChecker(json).Valid()) << json;

  Progress restored(Opts(job, 100, 0));
  ASSERT_TRUE(restored.Restore(p.ToProto()).ok());
  DashboardStatus again;
  restored.FillStatus(kT0 + absl::Seconds(4), &again);
  ASSERT_EQ(again.workers.size(), 2u);
  EXPECT_EQ(again.workers[0].bytes_sent, 150);
  EXPECT_EQ(again.workers[0].staleness_max, 3);
  EXPECT_EQ(again.workers[0].step, 2);
}

TEST(ProgressTest, ForgottenWorkersAreSummedAndTheTotalsStay) {
  const JobSpec job = Job(2, 1, ASYNC);
  Progress p(Opts(job, 100, 0));
  p.Start(kT0);
  ASSERT_TRUE(p.Add(WithTraffic(Train(0, 0, 1, 1.0, 8), 100, 200, 30, 4, 6, 3), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(WithTraffic(Train(1, 0, 1, 1.0, 8), 10, 20, 3, 2, 0, 5), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(p.Add(WithTraffic(Train(2, 0, 1, 1.0, 4), 1, 2, 0, 1, 1, 7), kT0 + absl::Seconds(2)).ok());
  const double rate = p.samples_per_second(kT0 + absl::Seconds(4));
  p.ForgetWorkers([](int rank) { return rank >= 1; });

  DashboardStatus status;
  p.FillStatus(kT0 + absl::Seconds(4), &status);
  ASSERT_EQ(status.workers.size(), 1u);
  EXPECT_EQ(p.samples_per_second(kT0 + absl::Seconds(4)), rate);
  const std::string json = p.SummaryJson(RUNNING, "", kT0 + absl::Seconds(4));
  EXPECT_TRUE(Contains(json,
                       "\"forgotten_workers\": {\"workers\": 2, \"samples\": 12, \"bytes_sent\": 11, "
                       "\"bytes_received\": 22, \"compression_saved_bytes\": 3}"))
      << json;
  EXPECT_FALSE(Contains(json, "\"rank\": 1,")) << json;
  EXPECT_TRUE(JsonChecker(json).Valid()) << json;

  Progress restored(Opts(job, 100, 0));
  ASSERT_TRUE(restored.Restore(p.ToProto()).ok());
  EXPECT_EQ(restored.ToProto().SerializeAsString(), p.ToProto().SerializeAsString());
  EXPECT_EQ(restored.SummaryJson(RUNNING, "", kT0 + absl::Seconds(4)), json);
}

TEST(ProgressTest, EachReportBecomesATimelinePoint) {
  Progress p(Opts(Job(1, 2), 100, 0));
  ProgressReport r = WithTraffic(Train(0, 1, 7, 6.0, 4, 2), 0, 0, 0, 2, 3, 2);
  r.mutable_step_times()->set_steps(2);
  r.mutable_step_times()->set_compute_seconds(1.0);
  r.mutable_step_times()->set_push_seconds(0.5);
  ASSERT_TRUE(p.Add(r, kT0 + absl::Seconds(3)).ok());
  int64_t next = 0;
  std::vector<TimelinePoint> points = p.TimelineSince(0, 10, &next);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(next, 1);
  EXPECT_DOUBLE_EQ(points[0].t, 3);  // kT0 is the scheduler's start
  EXPECT_EQ(points[0].epoch, 1);
  EXPECT_EQ(points[0].step, 7);
  EXPECT_DOUBLE_EQ(points[0].loss, 1.5);
  EXPECT_DOUBLE_EQ(points[0].compute, 0.5);
  EXPECT_DOUBLE_EQ(points[0].push, 0.25);
  EXPECT_DOUBLE_EQ(points[0].staleness_mean, 1.5);
  EXPECT_EQ(points[0].staleness_max, 2);
  // A rejected report adds no point, nor does one without training (evaluation, done).
  EXPECT_FALSE(p.Add(Train(0, 5, 7, 1.0, 4), kT0).ok());
  ProgressReport done;
  done.set_worker_rank(0);
  done.set_epoch(1);
  done.set_step(7);
  done.set_done(true);
  ASSERT_TRUE(p.Add(done, kT0 + absl::Seconds(4)).ok());
  EXPECT_TRUE(p.TimelineSince(1, 10, &next).empty());
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
