#include "scheduler/eval_pool.h"

#include <cmath>
#include <vector>

#include "data/score_histogram.h"
#include "data/score_histogram_proto.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

EvalPool::Options Opts(int64_t test_samples, int workers, int epochs = 2) {
  EvalPool::Options o;
  o.test_samples = test_samples;
  o.num_workers = workers;
  o.epochs = epochs;
  return o;
}

// A report of lease `lease` with `correct` right answers and loss 0.5 per sample.
ProgressReport Result(int rank, const EvalLease& lease, int64_t correct) {
  ProgressReport r;
  r.set_worker_rank(rank);
  r.set_epoch(lease.epoch);
  EvalStats* e = r.add_evals();
  e->set_lease_id(lease.id);
  e->set_samples(lease.end - lease.begin);
  e->set_correct(correct);
  e->set_loss_sum(0.5 * static_cast<double>(lease.end - lease.begin));
  return r;
}

// A CTR model's prediction and label for test sample i: many distinct probabilities, some tied.
double Probability(int64_t i) { return 1 / (1 + std::exp(-static_cast<double>(i % 17 - 8) / 3)); }
bool Clicked(int64_t i) { return (i * 37) % 100 < 20 + 3 * (i % 17); }

// The histogram of test samples [begin, end).
data::ScoreHistogram Histogram(int64_t begin, int64_t end) {
  data::ScoreHistogram h;
  for (int64_t i = begin; i < end; ++i) EXPECT_TRUE(h.Add(Probability(i), Clicked(i)).ok());
  return h;
}

// Result() with the lease's scores.
ProgressReport Scored(int rank, const EvalLease& lease) {
  ProgressReport r = Result(rank, lease, 0);
  *r.mutable_evals(0)->mutable_scores() = data::ScoreHistogramToProto(Histogram(lease.begin, lease.end));
  return r;
}

TEST(EvalPoolTest, LeaseSizeIsAQuarterOfAWorkersShare) {
  EXPECT_EQ(EvalPool(Opts(10000, 2)).lease_size(), 1250);
  EXPECT_EQ(EvalPool(Opts(100, 3)).lease_size(), 9);  // ceil(100 / 12)
  EXPECT_EQ(EvalPool(Opts(5, 4)).lease_size(), 1);
  EXPECT_EQ(EvalPool(Opts(0, 4)).lease_size(), 1);
}

TEST(EvalPoolTest, CoversEveryTestSampleExactlyOnce) {
  EvalPool pool(Opts(100, 3));  // Leases of 9: 11 of 9 and one of 1.
  std::vector<int> seen(100, 0);
  int leases = 0;
  for (int i = 0;; ++i) {
    absl::StatusOr<EvalLease> lease = pool.Next(i % 3, 0);
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_FALSE(lease->wait);  // Reported at once below, so never waiting.
    if (lease->epoch_done) break;
    ++leases;
    EXPECT_EQ(lease->id, leases);
    EXPECT_EQ(lease->epoch, 0);
    for (int64_t s = lease->begin; s < lease->end; ++s) ++seen[s];
    ASSERT_TRUE(pool.Check(Result(i % 3, *lease, 1)).ok());
    EXPECT_EQ(pool.Record(Result(i % 3, *lease, 1)), std::vector<int>{0});
  }
  EXPECT_EQ(leases, 12);
  for (int s = 0; s < 100; ++s) ASSERT_EQ(seen[s], 1) << "test sample " << s;
  EXPECT_TRUE(pool.complete(0));
  EXPECT_FALSE(pool.any_incomplete());
  const EvalPool::Totals totals = pool.totals(0);
  EXPECT_EQ(totals.samples, 100);
  EXPECT_EQ(totals.correct, 12);
  EXPECT_DOUBLE_EQ(totals.loss_sum, 50.0);
  // The next epoch has its own leases, with ids continuing.
  EXPECT_FALSE(pool.opened(1));
  absl::StatusOr<EvalLease> next = pool.Next(0, 1);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id, 13);
  EXPECT_EQ(next->begin, 0);
  EXPECT_TRUE(pool.opened(1));
  EXPECT_FALSE(pool.complete(1));
}

TEST(EvalPoolTest, WaitWhileLeasesAreOutThenEpochDone) {
  EvalPool pool(Opts(8, 1));  // Leases of 2: four of them.
  std::vector<EvalLease> held;
  for (int i = 0; i < 4; ++i) held.push_back(*pool.Next(i % 2, 0));
  absl::StatusOr<EvalLease> more = pool.Next(0, 0);
  ASSERT_TRUE(more.ok());
  EXPECT_TRUE(more->wait);
  EXPECT_FALSE(more->epoch_done);
  for (int i = 0; i < 3; ++i) pool.Record(Result(i % 2, held[i], 2));
  EXPECT_TRUE(pool.Next(0, 0)->wait);
  EXPECT_FALSE(pool.complete(0));
  EXPECT_TRUE(pool.any_incomplete());
  pool.Record(Result(1, held[3], 2));
  more = pool.Next(0, 0);
  EXPECT_TRUE(more->epoch_done);
  EXPECT_FALSE(more->wait);
  EXPECT_TRUE(pool.complete(0));
}

TEST(EvalPoolTest, ADeadHoldersLeasesAreHandedToOthers) {
  EvalPool pool(Opts(8, 1));
  const EvalLease a = *pool.Next(0, 0);  // [0, 2)
  const EvalLease b = *pool.Next(1, 0);  // [2, 4)
  const EvalLease c = *pool.Next(1, 0);  // [4, 6)
  const EvalLease d = *pool.Next(0, 0);  // [6, 8)
  pool.Record(Result(1, b, 1));
  EXPECT_EQ(pool.Release(1), 1);  // Worker 1 died holding c; b is reported and stays counted.
  EXPECT_EQ(pool.Release(1), 0);
  const EvalLease again = *pool.Next(0, 0);
  EXPECT_EQ(again.id, c.id);
  EXPECT_EQ(again.begin, 4);
  EXPECT_EQ(again.end, 6);
  pool.Record(Result(0, a, 1));
  pool.Record(Result(0, again, 1));
  pool.Record(Result(0, d, 1));
  EXPECT_TRUE(pool.complete(0));
  EXPECT_EQ(pool.totals(0).samples, 8);
  EXPECT_EQ(pool.totals(0).correct, 4);
}

TEST(EvalPoolTest, ResultsCountOncePerLease) {
  EvalPool pool(Opts(4, 1));  // Leases of 1.
  const EvalLease a = *pool.Next(0, 0);
  EXPECT_EQ(pool.Record(Result(0, a, 1)), std::vector<int>{0});
  // A retried report, and the old holder's report of a lease handed on: ignored.
  EXPECT_TRUE(pool.Check(Result(0, a, 0)).ok());
  EXPECT_TRUE(pool.Record(Result(0, a, 0)).empty());
  ProgressReport twice = Result(1, a, 0);
  *twice.add_evals() = twice.evals(0);
  EXPECT_TRUE(pool.Record(twice).empty());
  EXPECT_EQ(pool.totals(0).samples, 1);
  EXPECT_EQ(pool.totals(0).correct, 1);
}

TEST(EvalPoolTest, ResultsCountOnlyFromTheWorkerTheLeaseIsOutWith) {
  EvalPool pool(Opts(4, 1));  // Leases of 1.
  const EvalLease a = *pool.Next(0, 0);
  // Worker 1 reports worker 0's lease, then a lease nobody was handed: refused, nothing counted.
  absl::Status theirs = pool.Check(Result(1, a, 1));
  EXPECT_EQ(theirs.code(), absl::StatusCode::kPermissionDenied) << theirs;
  EXPECT_EQ(theirs.message(),
            "evaluation report from worker 1 for lease 1: the lease was not handed to it (it is "
            "out with worker 0)");
  EvalLease free = a;
  free.id = 2;
  free.begin = 1;
  free.end = 2;
  EXPECT_EQ(pool.Check(Result(1, free, 1)).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(pool.totals(0).samples, 0);
  // The holder's own report counts.
  EXPECT_TRUE(pool.Check(Result(0, a, 1)).ok());
}

TEST(EvalPoolTest, RejectsUnknownLeasesAndWrongCounts) {
  EvalPool pool(Opts(10, 1));  // Leases of 3.
  const EvalLease a = *pool.Next(0, 0);
  ProgressReport r = Result(0, a, 1);
  r.mutable_evals(0)->set_lease_id(9);
  absl::Status s = pool.Check(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown lease id"), absl::string_view::npos) << s;
  r = Result(0, a, 1);
  r.mutable_evals(0)->set_samples(2);
  s = pool.Check(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("got 2 samples and 0 skipped records, expected 3"), absl::string_view::npos) << s;
  // A record skipped as bad holds no sample but is the lease's: 2 + 1 is the whole lease.
  r.mutable_evals(0)->set_skipped_records(1);
  EXPECT_TRUE(pool.Check(r).ok()) << pool.Check(r);
  r.mutable_evals(0)->set_skipped_records(-1);
  r.mutable_evals(0)->set_samples(4);
  EXPECT_EQ(pool.Check(r).code(), absl::StatusCode::kInvalidArgument);
  r = Result(0, a, 4);
  EXPECT_EQ(pool.Check(r).code(), absl::StatusCode::kInvalidArgument);
  r = Result(0, a, -1);
  EXPECT_EQ(pool.Check(r).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Next(0, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(pool.Next(0, -1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(EvalPoolTest, ScoresOfEveryLeaseMergeOnceIntoTheWholeTestSetsAuc) {
  EvalPool pool(Opts(100, 3, 1));  // Leases of 9: 12 of them.
  std::vector<EvalLease> leases;
  for (int i = 0; i < 12; ++i) leases.push_back(*pool.Next(i % 3, 0));
  for (int i = 0; i < 11; ++i) {
    ASSERT_TRUE(pool.Check(Scored(i % 3, leases[i])).ok());
    pool.Record(Scored(i % 3, leases[i]));
  }
  // A retried report of lease 1 and the old holder's results for it: ignored, scores included.
  ProgressReport again = Scored(2, leases[0]);
  *again.mutable_evals(0)->mutable_scores() = data::ScoreHistogramToProto(Histogram(50, 59));
  ASSERT_TRUE(pool.Check(again).ok());
  EXPECT_TRUE(pool.Record(again).empty());
  ASSERT_NE(pool.scores(0), nullptr);
  EXPECT_TRUE(pool.scores(0)->any());
  EXPECT_FALSE(pool.scores(0)->finished());
  EXPECT_TRUE(std::isnan(pool.scores(0)->auc()));  // Not before every lease is in.

  pool.Record(Scored(0, leases[11]));
  ASSERT_TRUE(pool.complete(0));
  const data::ScoreHistogram whole = Histogram(0, 100);
  EXPECT_TRUE(pool.scores(0)->finished());
  EXPECT_EQ(pool.scores(0)->auc(), *whole.Auc());
  EXPECT_EQ(pool.scores(0)->error_bound(), *whole.ErrorBound());
  EXPECT_GT(pool.scores(0)->auc(), 0.5);
  EXPECT_GT(pool.scores(0)->error_bound(), 0);  // Samples 17 apart share a probability.
  EXPECT_EQ(pool.scores(1), nullptr);
}

TEST(EvalPoolTest, AnEpochWhereSomeLeaseCameWithoutScoresHasNoAuc) {
  EvalPool pool(Opts(8, 1));  // Leases of 2.
  for (int i = 0; i < 4; ++i) {
    const EvalLease lease = *pool.Next(0, 0);
    pool.Record(i == 2 ? Result(0, lease, 1) : Scored(0, lease));
  }
  ASSERT_TRUE(pool.complete(0));
  EXPECT_TRUE(pool.scores(0)->any());
  EXPECT_TRUE(std::isnan(pool.scores(0)->auc()));
  EXPECT_TRUE(std::isnan(pool.scores(0)->error_bound()));
  // Image models report no scores at all: no AUC either.
  for (int i = 0; i < 4; ++i) pool.Record(Result(0, *pool.Next(0, 1), 1));
  ASSERT_TRUE(pool.complete(1));
  EXPECT_FALSE(pool.scores(1)->any());
}

TEST(EvalPoolTest, OneLabelOnlyLeavesTheAucUndefined) {
  EvalPool pool(Opts(2, 1, 1));  // Leases of 1.
  for (int i = 0; i < 2; ++i) {
    const EvalLease lease = *pool.Next(0, 0);
    ProgressReport r = Result(0, lease, 1);
    data::ScoreHistogram h;
    ASSERT_TRUE(h.Add(0.1 + 0.5 * i, true).ok());
    *r.mutable_evals(0)->mutable_scores() = data::ScoreHistogramToProto(h);
    pool.Record(r);
  }
  EXPECT_TRUE(pool.scores(0)->any());
  EXPECT_TRUE(std::isnan(pool.scores(0)->auc()));
}

TEST(EvalPoolTest, RejectsMalformedScoresAndScoresThatAreNotOnePerSample) {
  EvalPool pool(Opts(10, 1));  // Leases of 3.
  const EvalLease a = *pool.Next(0, 0);
  ProgressReport r = Scored(0, a);
  r.mutable_evals(0)->mutable_scores()->set_bins(0, 70000);
  absl::Status s = pool.Check(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "evaluation report from worker 0 for lease 1: score histogram: entry 0 is bin 70000, expected a bin "
            "below 65536");
  r = Scored(0, a);
  r.mutable_evals(0)->mutable_scores()->add_positives(1);
  s = pool.Check(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "evaluation report from worker 0 for lease 1: score histogram: 3 bins, 4 positive counts and 3 "
            "negative counts, expected as many of each");
  r = Scored(0, a);
  r.mutable_evals(0)->mutable_scores()->set_negatives(0, r.evals(0).scores().negatives(0) + 1);
  s = pool.Check(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "evaluation report from worker 0 for lease 1: score histogram holds 4 predictions, expected one per "
            "sample (3)");
  EXPECT_TRUE(pool.Check(Scored(0, a)).ok());
}

TEST(EvalPoolTest, EmptyTestSetIsCompleteAtOnce) {
  EvalPool pool(Opts(0, 2));
  absl::StatusOr<EvalLease> lease = pool.Next(0, 0);
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(lease->epoch_done);
  EXPECT_TRUE(pool.complete(0));
  EXPECT_EQ(pool.totals(0).samples, 0);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
