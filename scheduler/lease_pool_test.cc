#include "scheduler/lease_pool.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

LeasePool::Options Opts(int64_t n, int batch, int lease_batches, int epochs, int64_t max_batches = 0) {
  LeasePool::Options o;
  o.train_samples = n;
  o.batch_size = batch;
  o.lease_batches = lease_batches;
  o.epochs = epochs;
  o.max_batches = max_batches;
  return o;
}

// A report from `rank` in `epoch` that lease `id` has `batches_done` batches done.
ProgressReport Progress(int rank, int epoch, int64_t id, int64_t batches_done) {
  ProgressReport r;
  r.set_worker_rank(rank);
  r.set_epoch(epoch);
  LeaseProgress* p = r.add_leases();
  p->set_lease_id(id);
  p->set_batches_done(batches_done);
  return r;
}

// What a server that applied the report's batches confirms (HeartbeatRequest.applied_leases).
AppliedLeases Applied(const ProgressReport& report) {
  AppliedLeases applied;
  applied.set_data_epoch(report.epoch());
  for (const LeaseProgress& p : report.leases()) {
    applied.add_lease_ids(p.lease_id());
    applied.add_batches(p.batches_done());
  }
  return applied;
}

// Checks and records the report, and has server 0 confirm the batches it names, as a server does
// once an honest worker pushed them; returns the ids of the leases that completed.
std::vector<int64_t> Report(LeasePool* pool, const ProgressReport& report) {
  EXPECT_TRUE(pool->Check(report).ok()) << pool->Check(report);
  pool->Record(report);
  std::vector<int64_t> ids;
  for (const LeaseRecord& lease : pool->Confirm(0, Applied(report))) ids.push_back(lease.id);
  return ids;
}

// `rank` reports `lease` complete.
void Complete(LeasePool* pool, int rank, const Lease& lease) {
  const LeaseRecord& record = pool->lease(lease.id);
  Report(pool, Progress(rank, lease.epoch, lease.id, record.batches));
}

TEST(LeasePoolTest, CoversEveryPositionExactlyOncePerEpoch) {
  LeasePool pool(Opts(1000, 32, 4, 2));  // leases of 128 positions, the last 1000 - 7*128 = 104.
  std::map<int64_t, LeaseRecord> cut;    // as each lease was complete
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> seen(1000, 0);
    int leases = 0;
    for (int i = 0;; ++i) {
      absl::StatusOr<Lease> lease = pool.Next(i % 3, epoch);
      ASSERT_TRUE(lease.ok()) << lease.status();
      ASSERT_FALSE(lease->wait);
      if (lease->epoch_done) break;
      ++leases;
      EXPECT_EQ(lease->worker_rank, i % 3);
      EXPECT_EQ(lease->epoch, epoch);
      EXPECT_EQ(lease->first_batch, 0);
      if (lease->end < 1000) {
        EXPECT_EQ(lease->end - lease->begin, 128);
      }
      for (int64_t p = lease->begin; p < lease->end; ++p) ++seen[p];
      cut[lease->id] = pool.lease(lease->id);  // before Complete, which may settle and drop it
      Complete(&pool, i % 3, *lease);
    }
    EXPECT_EQ(leases, 8);
    for (int p = 0; p < 1000; ++p) ASSERT_EQ(seen[p], 1) << "epoch " << epoch << " position " << p;
  }
  ASSERT_EQ(pool.num_leases(), 16);
  EXPECT_EQ(cut[8].begin, 896);
  EXPECT_EQ(cut[8].end, 1000);
  EXPECT_EQ(cut[8].batches, 4);  // 104 positions: three batches of 32 and a tail of 8.
  EXPECT_EQ(cut[16].id, 16);
  EXPECT_EQ(cut[16].epoch, 1);
  // Every lease is complete and reported: the pool keeps none of them.
  EXPECT_EQ(pool.first_id(), 17);
  EXPECT_EQ(pool.num_kept(), 0);
}

TEST(LeasePoolTest, WaitWhileLeasesAreOutEpochDoneOnceAllAreComplete) {
  LeasePool pool(Opts(10, 5, 1, 3));
  const Lease a = *pool.Next(0, 0);
  const Lease b = *pool.Next(1, 0);
  EXPECT_EQ(a.end, 5);
  EXPECT_EQ(b.end, 10);
  // Everything is handed out but nothing is complete.
  absl::StatusOr<Lease> next = pool.Next(0, 0);
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->wait);
  EXPECT_FALSE(next->epoch_done);
  EXPECT_EQ(next->id, 0);
  // Nobody may move on while the epoch is not done.
  EXPECT_EQ(pool.Next(0, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  Complete(&pool, 0, a);
  EXPECT_TRUE(pool.Next(0, 0)->wait);  // b is still out.
  // Part of b is not enough.
  EXPECT_TRUE(Report(&pool, Progress(1, 0, b.id, 0)).empty());
  EXPECT_TRUE(pool.Next(0, 0)->wait);
  Complete(&pool, 1, b);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  EXPECT_TRUE(pool.Next(1, 0)->epoch_done);
  // Worker 0 opens epoch 1; a late request of worker 1 for epoch 0 still hears epoch_done.
  absl::StatusOr<Lease> first = pool.Next(0, 1);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->epoch_done);
  EXPECT_FALSE(first->wait);
  EXPECT_EQ(first->begin, 0);
  EXPECT_TRUE(pool.Next(1, 0)->epoch_done);
  EXPECT_EQ(pool.current_epoch(), 1);
}

TEST(LeasePoolTest, AskingForTheNextEpochTooEarlyIsFailedPrecondition) {
  LeasePool pool(Opts(10, 5, 1, 3));
  ASSERT_TRUE(pool.Next(0, 0).ok());
  EXPECT_EQ(pool.Next(1, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Next(1, 2).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Next(1, 3).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(pool.Next(1, -1).status().code(), absl::StatusCode::kOutOfRange);
  // The refused requests changed nothing.
  EXPECT_EQ(pool.Next(1, 0)->begin, 5);
  EXPECT_EQ(pool.num_leases(), 2);
}

// Worker 1 dies in the middle of a 4-batch lease: it reported 1 batch done and had pushed batch 1
// as well. The remainder starts at batch 1; the servers skip the repeated batch 1, so every
// position of the epoch is applied exactly once.
TEST(LeasePoolTest, DeathMidLeaseHandsOnTheRemainderFromTheReportedBatch) {
  LeasePool pool(Opts(100, 10, 4, 1));            // Leases [0, 40), [40, 80), [80, 100).
  std::set<std::pair<int64_t, int64_t>> applied;  // (lease, batch), as the servers dedupe.
  std::vector<int> seen(100, 0);
  auto push = [&](const Lease& lease, int64_t batch) {
    if (!applied.insert({lease.id, batch}).second) return;  // Skipped: applied before.
    const int64_t begin = lease.begin + batch * 10;
    for (int64_t p = begin; p < std::min(lease.end, begin + 10); ++p) ++seen[p];
  };

  const Lease dying = *pool.Next(1, 0);
  ASSERT_EQ(dying.begin, 0);
  push(dying, 0);
  ASSERT_TRUE(Report(&pool, Progress(1, 0, dying.id, 1)).empty());
  push(dying, 1);  // Pushed, never reported.
  EXPECT_EQ(pool.Release(1), 1);
  EXPECT_EQ(pool.Release(1), 0);  // Already returned.
  EXPECT_EQ(pool.lease(dying.id).holder, -1);

  // The remainder comes before fresh leases, with its id and range.
  const Lease rest = *pool.Next(0, 0);
  EXPECT_EQ(rest.id, dying.id);
  EXPECT_EQ(rest.begin, 0);
  EXPECT_EQ(rest.end, 40);
  EXPECT_EQ(rest.first_batch, 1);
  EXPECT_EQ(rest.worker_rank, 0);
  EXPECT_EQ(pool.lease(dying.id).holder, 0);
  EXPECT_EQ(pool.lease(dying.id).holders, (std::vector<int>{1, 0}));
  for (int64_t b = rest.first_batch; b < 4; ++b) push(rest, b);
  EXPECT_EQ(Report(&pool, Progress(0, 0, rest.id, 4)), std::vector<int64_t>{dying.id});

  for (;;) {
    absl::StatusOr<Lease> lease = pool.Next(0, 0);
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_FALSE(lease->wait);
    if (lease->epoch_done) break;
    EXPECT_EQ(lease->first_batch, 0);
    for (int64_t b = 0; b < pool.lease(lease->id).batches; ++b) push(*lease, b);
    Complete(&pool, 0, *lease);
  }
  EXPECT_EQ(applied.size(), 10u);
  for (int p = 0; p < 100; ++p) ASSERT_EQ(seen[p], 1) << "position " << p;
}

TEST(LeasePoolTest, ReleaseReturnsOnlyTheWorkersIncompleteLeases) {
  LeasePool pool(Opts(60, 10, 1, 1));
  const Lease a = *pool.Next(1, 0);
  const Lease b = *pool.Next(1, 0);
  const Lease c = *pool.Next(2, 0);
  Complete(&pool, 1, a);
  EXPECT_EQ(pool.Release(1), 1);  // b only.
  const Lease again = *pool.Next(2, 0);
  EXPECT_EQ(again.id, b.id);
  EXPECT_EQ(again.first_batch, 0);        // Nothing of b was reported.
  EXPECT_EQ(pool.Next(2, 0)->begin, 30);  // Then fresh leases again.
  EXPECT_EQ(pool.lease(c.id).holder, 2);
}

TEST(LeasePoolTest, RemaindersGoOutLowestIdFirst) {
  LeasePool pool(Opts(60, 10, 1, 1));
  const Lease a = *pool.Next(1, 0);
  const Lease b = *pool.Next(2, 0);
  const Lease c = *pool.Next(1, 0);
  EXPECT_EQ(pool.Release(2), 1);
  EXPECT_EQ(pool.Release(1), 2);
  EXPECT_EQ(pool.Next(0, 0)->id, a.id);
  EXPECT_EQ(pool.Next(0, 0)->id, b.id);
  EXPECT_EQ(pool.Next(0, 0)->id, c.id);
  EXPECT_EQ(pool.Next(0, 0)->begin, 30);
}

TEST(LeasePoolTest, LateReportOfTheDeadHolderOnlyRaisesProgress) {
  LeasePool pool(Opts(50, 10, 5, 1));  // One lease of 5 batches.
  const Lease lease = *pool.Next(1, 0);
  Report(&pool, Progress(1, 0, lease.id, 2));
  ASSERT_EQ(pool.Release(1), 1);
  // The dead holder's last report arrives while the remainder waits in the pool: it starts later.
  EXPECT_TRUE(Report(&pool, Progress(1, 0, lease.id, 3)).empty());
  const Lease rest = *pool.Next(0, 0);
  EXPECT_EQ(rest.first_batch, 3);
  Report(&pool, Progress(0, 0, lease.id, 4));
  // An older report of the dead holder arrives after that: ignored, progress never falls.
  EXPECT_TRUE(Report(&pool, Progress(1, 0, lease.id, 3)).empty());
  EXPECT_EQ(pool.lease(lease.id).batches_done, 4);
  // The dead holder's report completes it: counted once, whoever reports it.
  EXPECT_EQ(Report(&pool, Progress(1, 0, lease.id, 5)), std::vector<int64_t>{lease.id});
  EXPECT_TRUE(Report(&pool, Progress(0, 0, lease.id, 5)).empty());
  EXPECT_TRUE(Report(&pool, Progress(1, 0, lease.id, 5)).empty());
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
}

TEST(LeasePoolTest, ARemainderCompletedByALateReportIsNotHandedOut) {
  LeasePool pool(Opts(20, 10, 2, 1));
  const Lease lease = *pool.Next(1, 0);
  ASSERT_EQ(pool.Release(1), 1);
  EXPECT_EQ(Report(&pool, Progress(1, 0, lease.id, 2)), std::vector<int64_t>{lease.id});
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  EXPECT_EQ(pool.Release(1), 0);
}

TEST(LeasePoolTest, RejectsReportsThatDoNotFitTheLease) {
  LeasePool pool(Opts(30, 10, 2, 2));  // Leases of 2 batches and 1 batch.
  const Lease lease = *pool.Next(0, 0);
  auto code = [&](const ProgressReport& r) { return pool.Check(r).code(); };
  EXPECT_EQ(code(Progress(0, 0, 0, 1)), absl::StatusCode::kInvalidArgument);         // Unknown id.
  EXPECT_EQ(code(Progress(0, 0, 2, 1)), absl::StatusCode::kInvalidArgument);         // Not cut yet.
  EXPECT_EQ(code(Progress(0, 1, lease.id, 1)), absl::StatusCode::kInvalidArgument);  // Other epoch.
  EXPECT_EQ(code(Progress(0, 0, lease.id, 3)), absl::StatusCode::kInvalidArgument);  // Beyond 2.
  EXPECT_EQ(code(Progress(0, 0, lease.id, -1)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Progress(1, 0, lease.id, 1)), absl::StatusCode::kInvalidArgument);  // Not its lease.
  // The messages name the lease and what was expected.
  EXPECT_EQ(pool.Check(Progress(0, 0, lease.id, 3)).message(),
            "progress report from worker 0 for training lease 1: 3 batches done, expected 0..2 "
            "(positions [0, 20) of epoch 0)");
  EXPECT_EQ(pool.Check(Progress(0, 1, lease.id, 1)).message(),
            "progress report from worker 0 for training lease 1: the lease is of epoch 0, the report "
            "of epoch 1");
  EXPECT_EQ(pool.Check(Progress(1, 0, lease.id, 1)).message(),
            "progress report from worker 1 for training lease 1: the lease was never handed to "
            "worker 1 (holders: 0)");
  // One bad entry fails the whole report.
  ProgressReport mixed = Progress(0, 0, lease.id, 2);
  mixed.add_leases()->set_lease_id(7);
  EXPECT_EQ(code(mixed), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool.Check(Progress(0, 0, lease.id, 2)).ok());
  EXPECT_EQ(pool.lease(lease.id).batches_done, 0);  // Check records nothing.
}

TEST(LeasePoolTest, MaxBatchesCapsTheWholeJob) {
  LeasePool pool(Opts(100, 10, 4, 5, /*max_batches=*/6));
  absl::StatusOr<Lease> a = pool.Next(0, 0);
  absl::StatusOr<Lease> b = pool.Next(1, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->end - a->begin, 40);
  EXPECT_EQ(b->begin, 40);
  EXPECT_EQ(b->end, 60);  // Only 2 of the 6 batches were left.
  EXPECT_EQ(pool.batches_leased(), 6);
  // No more leases, but the epoch is not done until the cut ones are.
  EXPECT_TRUE(pool.Next(0, 0)->wait);
  Complete(&pool, 0, *a);
  // A remainder does not count against the budget again.
  EXPECT_EQ(pool.Release(1), 1);
  absl::StatusOr<Lease> rest = pool.Next(0, 0);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->id, b->id);
  EXPECT_EQ(pool.batches_leased(), 6);
  EXPECT_TRUE(pool.Next(1, 0)->wait);
  Complete(&pool, 0, *rest);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  // Later epochs hand out nothing.
  EXPECT_TRUE(pool.Next(0, 1)->epoch_done);
  EXPECT_TRUE(pool.Next(1, 1)->epoch_done);
  EXPECT_TRUE(pool.Next(1, 2)->epoch_done);
  EXPECT_EQ(pool.num_leases(), 2);
}

TEST(LeasePoolTest, ShortTailBatchCountsAsOne) {
  LeasePool pool(Opts(25, 10, 1, 2, /*max_batches=*/4));
  for (int64_t end : {10, 20, 25}) {
    const Lease lease = *pool.Next(0, 0);
    EXPECT_EQ(lease.end, end);
    EXPECT_EQ(pool.lease(lease.id).batches, 1);
    Complete(&pool, 0, lease);
  }
  EXPECT_EQ(pool.batches_leased(), 3);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  const Lease last = *pool.Next(0, 1);
  EXPECT_EQ(last.end, 10);
  EXPECT_TRUE(pool.Next(0, 1)->wait);
  Complete(&pool, 0, last);
  EXPECT_TRUE(pool.Next(0, 1)->epoch_done);
}

TEST(LeasePoolTest, EmptyTrainingSetIsDoneAtOnce) {
  LeasePool pool(Opts(0, 10, 1, 2));
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  EXPECT_TRUE(pool.Next(0, 1)->epoch_done);
  EXPECT_EQ(pool.num_leases(), 0);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain

namespace pstrain::scheduler {
namespace {

TEST(LeasePoolTest, AnEpochIsTrainedOnceEveryLeaseOfItIsComplete) {
  LeasePool pool(Opts(10, 5, 1, 3));
  EXPECT_FALSE(pool.EpochTrained(0));
  const Lease a = *pool.Next(0, 0);
  const Lease b = *pool.Next(1, 0);
  Complete(&pool, 0, a);
  EXPECT_FALSE(pool.EpochTrained(0));  // b is out.
  Complete(&pool, 1, b);
  EXPECT_TRUE(pool.EpochTrained(0));
  EXPECT_FALSE(pool.EpochTrained(1));
  ASSERT_TRUE(pool.Next(0, 1).ok());  // Epoch 1 opens; epoch 0 stays trained.
  EXPECT_TRUE(pool.EpochTrained(0));
  EXPECT_FALSE(pool.EpochTrained(1));
}

TEST(LeasePoolTest, ABudgetSpentTrainsTheLaterEpochsOnceItsLeasesAreComplete) {
  LeasePool pool(Opts(10, 5, 1, 3, /*max_batches=*/1));
  const Lease a = *pool.Next(0, 0);
  EXPECT_FALSE(pool.EpochTrained(2));
  Complete(&pool, 0, a);
  EXPECT_TRUE(pool.EpochTrained(0));
  EXPECT_TRUE(pool.EpochTrained(2));
}

TEST(LeasePoolTest, BatchesHandedToAWorkerBoundItsClaims) {
  LeasePool pool(Opts(25, 5, 2, 1));  // Leases of 2, 2 and 1 batches.
  EXPECT_EQ(pool.BatchesHandedTo(0), 0);
  ASSERT_TRUE(pool.Next(0, 0).ok());
  ASSERT_TRUE(pool.Next(1, 0).ok());
  ASSERT_TRUE(pool.Next(0, 0).ok());
  EXPECT_EQ(pool.BatchesHandedTo(0), 3);
  EXPECT_EQ(pool.BatchesHandedTo(1), 2);
  // Worker 1 leaves: its lease goes to worker 0 as a remainder and counts for both.
  EXPECT_EQ(pool.Release(1), 1);
  ASSERT_TRUE(pool.Next(0, 0).ok());
  EXPECT_EQ(pool.BatchesHandedTo(0), 5);
  EXPECT_EQ(pool.BatchesHandedTo(1), 2);
  // A restored pool (a restarted scheduler) bounds the same claims.
  LeasePool restored(Opts(25, 5, 2, 1));
  ASSERT_TRUE(restored.Restore(pool.ToProto()).ok());
  EXPECT_EQ(restored.BatchesHandedTo(0), 5);
  EXPECT_EQ(restored.BatchesHandedTo(1), 2);
  EXPECT_EQ(restored.BatchesHandedTo(2), 0);
  // Once the membership forgets worker 1, so does the pool.
  restored.ForgetWorkers([](int rank) { return rank == 1; });
  EXPECT_EQ(restored.BatchesHandedTo(1), 0);
  EXPECT_EQ(restored.BatchesHandedTo(0), 5);
}

// Server `server`'s confirmation that it applied `batches` batches of lease `id` of `epoch`.
AppliedLeases Applied(int epoch, int64_t id, int64_t batches) {
  AppliedLeases applied;
  applied.set_data_epoch(epoch);
  applied.add_lease_ids(id);
  applied.add_batches(batches);
  return applied;
}

LeasePool::Options TwoServers(LeasePool::Options o) {
  o.num_servers = 2;
  return o;
}

TEST(LeasePoolTest, AWorkersClaimCompletesNothingUntilEveryServerConfirms) {
  LeasePool pool(TwoServers(Opts(20, 10, 2, 2)));  // One lease of 2 batches an epoch.
  const Lease a = *pool.Next(0, 0);
  ASSERT_TRUE(pool.Check(Progress(0, 0, a.id, 2)).ok());
  pool.Record(Progress(0, 0, a.id, 2));  // It claims both batches, pushed or not.
  EXPECT_FALSE(pool.lease(a.id).complete());
  EXPECT_TRUE(pool.Next(0, 0)->wait);
  EXPECT_FALSE(pool.EpochTrained(0));
  EXPECT_TRUE(pool.Confirm(0, Applied(0, a.id, 2)).empty());
  EXPECT_TRUE(pool.Confirm(1, Applied(0, a.id, 1)).empty());  // Server 1 has only one so far.
  EXPECT_TRUE(pool.Next(0, 0)->wait);
  const std::vector<LeaseRecord> done = pool.Confirm(1, Applied(0, a.id, 2));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, a.id);
  EXPECT_TRUE(pool.Confirm(1, Applied(0, a.id, 2)).empty());  // Returned once.
  EXPECT_TRUE(pool.EpochTrained(0));
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
}

TEST(LeasePoolTest, AServerConfirmsWithoutAnyClaimAndTheRemainderStartsAtTheConfirmedBatch) {
  LeasePool pool(TwoServers(Opts(30, 10, 3, 1)));
  const Lease a = *pool.Next(1, 0);
  // Worker 1 claims 3 batches but the servers applied 2 and 1: it dies, and the remainder starts
  // at the batch not applied everywhere.
  pool.Record(Progress(1, 0, a.id, 3));
  EXPECT_TRUE(pool.Confirm(0, Applied(0, a.id, 2)).empty());
  EXPECT_TRUE(pool.Confirm(1, Applied(0, a.id, 1)).empty());
  ASSERT_EQ(pool.Release(1), 1);
  const Lease rest = *pool.Next(0, 0);
  EXPECT_EQ(rest.id, a.id);
  EXPECT_EQ(rest.first_batch, 1);
  // Confirmations alone complete it; the new holder need not report.
  EXPECT_TRUE(pool.Confirm(0, Applied(0, a.id, 3)).empty());
  EXPECT_EQ(pool.Confirm(1, Applied(0, a.id, 3)).size(), 1u);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
}

TEST(LeasePoolTest, ConfirmationsThatDoNotFitAreSkippedAndCounted) {
  LeasePool pool(TwoServers(Opts(20, 10, 2, 1)));
  const Lease a = *pool.Next(0, 0);
  AppliedLeases bad;
  bad.set_data_epoch(0);
  for (auto [id, batches] : {std::pair<int64_t, int64_t>{7, 1}, {a.id, 3}, {a.id, -1}, {0, 1}}) {
    bad.add_lease_ids(id);
    bad.add_batches(batches);
  }
  bad.add_lease_ids(a.id);  // Without its count.
  int skipped = 0;
  EXPECT_TRUE(pool.Confirm(0, bad, &skipped).empty());
  EXPECT_EQ(skipped, 5);
  EXPECT_TRUE(pool.Confirm(0, Applied(1, a.id, 2), &skipped).empty());  // Another epoch.
  EXPECT_EQ(skipped, 1);
  EXPECT_TRUE(pool.Confirm(2, Applied(0, a.id, 2), &skipped).empty());  // No server 2.
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(pool.lease(a.id).applied, (std::vector<int64_t>{0, 0}));
}

TEST(LeasePoolTest, ReportFromMovesPastWhatTheServerConfirmedInFull) {
  LeasePool pool(TwoServers(Opts(40, 10, 1, 2)));  // Four leases of one batch an epoch.
  std::vector<Lease> leases;
  for (int i = 0; i < 4; ++i) leases.push_back(*pool.Next(0, 0));
  EXPECT_EQ(pool.ReportFrom(0), 1);
  pool.Confirm(0, Applied(0, 1, 1));
  pool.Confirm(0, Applied(0, 3, 1));
  EXPECT_EQ(pool.ReportFrom(0), 2);  // Lease 2 is the first it has not confirmed.
  EXPECT_EQ(pool.ReportFrom(1), 1);
  pool.Confirm(0, Applied(0, 2, 1));
  pool.Confirm(0, Applied(0, 4, 1));
  EXPECT_EQ(pool.ReportFrom(0), 5);
  for (int64_t id = 1; id <= 4; ++id) pool.Confirm(1, Applied(0, id, 1));
  EXPECT_TRUE(pool.Next(0, 1).ok());  // Epoch 1: its first lease is 5.
  EXPECT_EQ(pool.ReportFrom(1), 5);
  EXPECT_EQ(pool.ReportFrom(5), 0);  // No such server.
}

TEST(LeasePoolTest, ADeadServersConfirmationsStopCountingAndAReplacementFallsBackOnClaims) {
  LeasePool pool(TwoServers(Opts(40, 10, 2, 1)));
  const Lease a = *pool.Next(0, 0);
  const Lease b = *pool.Next(1, 0);
  pool.Record(Progress(0, 0, a.id, 2));
  pool.Record(Progress(1, 0, b.id, 1));
  pool.Confirm(0, Applied(0, a.id, 2));
  pool.Confirm(0, Applied(0, b.id, 1));
  // Server 1 dies before confirming a: server 0's word is enough from now on.
  const std::vector<LeaseRecord> done = pool.SetServerCounts(1, false);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, a.id);
  // A replacement takes rank 1 back from an older checkpoint. It never sees b's first batch (its
  // predecessor applied it), so its own count of b stays 0: for b, what b's holder reports counts
  // as rank 1's confirmation.
  EXPECT_TRUE(pool.SetServerCounts(1, true).empty());
  EXPECT_TRUE(pool.SetServerCounts(1, true).empty());  // No change.
  EXPECT_TRUE(pool.Confirm(0, Applied(0, b.id, 2)).empty());
  EXPECT_TRUE(pool.Next(0, 0)->wait);
  const std::vector<LeaseRecord> by_report = pool.Record(Progress(1, 0, b.id, 2));
  ASSERT_EQ(by_report.size(), 1u);
  EXPECT_EQ(by_report[0].id, b.id);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
}

TEST(LeasePoolTest, AfterAReplacementOnlyLeasesCutBeforeItTakeReports) {
  LeasePool pool(TwoServers(Opts(40, 10, 2, 1)));
  const Lease a = *pool.Next(0, 0);
  pool.SetServerCounts(1, false);
  pool.SetServerCounts(1, true);
  const Lease b = *pool.Next(0, 0);  // Cut after the replacement: its confirmations only.
  pool.Confirm(0, Applied(0, a.id, 2));
  pool.Confirm(0, Applied(0, b.id, 2));
  EXPECT_EQ(pool.Record(Progress(0, 0, a.id, 2)).size(), 1u);
  EXPECT_TRUE(pool.Record(Progress(0, 0, b.id, 2)).empty());
  EXPECT_EQ(pool.Confirm(1, Applied(0, b.id, 2)).size(), 1u);
  // The state keeps which leases take reports.
  LeasePool restored(TwoServers(Opts(40, 10, 2, 1)));
  ASSERT_TRUE(restored.Restore(pool.ToProto()).ok());
  EXPECT_EQ(restored.ToProto().reports_count_upto_size(), 2);
  EXPECT_EQ(restored.ToProto().reports_count_upto(1), a.id);
}

// A lease leaves the pool once it is settled: complete on every server, and reported in full by
// its holder or given up by it. Only the front of the id order goes (the watermark), and the saved
// state holds what is kept and the watermark, with what each worker was handed.
TEST(LeasePoolTest, SettledLeasesLeaveThePoolFromTheFront) {
  LeasePool pool(Opts(60, 10, 1, 1));
  const Lease a = *pool.Next(0, 0);
  const Lease b = *pool.Next(1, 0);
  const Lease c = *pool.Next(0, 0);
  Complete(&pool, 1, b);
  EXPECT_EQ(pool.first_id(), 1);  // a is still out: b waits behind it
  EXPECT_EQ(pool.num_kept(), 3);
  // Complete on the server, but its holder has not reported it: not settled.
  EXPECT_EQ(pool.Confirm(0, Applied(0, a.id, 1)).size(), 1u);
  EXPECT_EQ(pool.first_id(), 1);
  EXPECT_EQ(pool.SettledPosition(), 0);
  ASSERT_TRUE(pool.Check(Progress(0, 0, a.id, 1)).ok());
  pool.Record(Progress(0, 0, a.id, 1));
  EXPECT_EQ(pool.first_id(), c.id);
  EXPECT_EQ(pool.num_kept(), 1);
  EXPECT_EQ(pool.SettledPosition(), c.begin);
  EXPECT_EQ(pool.Find(a.id), nullptr);
  ASSERT_NE(pool.Find(c.id), nullptr);
  // A late report or confirmation of a dropped lease passes and changes nothing.
  EXPECT_TRUE(pool.Check(Progress(1, 0, b.id, 1)).ok());
  EXPECT_TRUE(pool.Record(Progress(1, 0, b.id, 1)).empty());
  int skipped = -1;
  EXPECT_TRUE(pool.Confirm(0, Applied(0, a.id, 1), &skipped).empty());
  EXPECT_EQ(skipped, 0);
  // Ids never cut are still unknown.
  EXPECT_EQ(pool.Check(Progress(0, 0, 9, 1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.ReportFrom(0), c.id);

  const LeasePoolState state = pool.ToProto();
  EXPECT_EQ(state.first_lease_id(), c.id);
  ASSERT_EQ(state.leases_size(), 1);
  EXPECT_EQ(state.leases(0).id(), c.id);
  LeasePool restored(Opts(60, 10, 1, 1));
  ASSERT_TRUE(restored.Restore(state).ok());
  EXPECT_EQ(restored.first_id(), c.id);
  EXPECT_EQ(restored.num_leases(), 3);
  EXPECT_EQ(restored.BatchesHandedTo(0), 2);  // a and c, though a is gone
  EXPECT_EQ(restored.BatchesHandedTo(1), 1);
  const Lease d = *restored.Next(1, 0);
  EXPECT_EQ(d.id, 4);
  EXPECT_EQ(d.begin, 30);
  // A state whose ids do not follow its watermark is refused.
  LeasePoolState bad = state;
  bad.set_first_lease_id(c.id + 1);
  EXPECT_EQ(LeasePool(Opts(60, 10, 1, 1)).Restore(bad).code(), absl::StatusCode::kInvalidArgument);
}

// A complete lease whose holder left before reporting it is settled by the leaving.
TEST(LeasePoolTest, ACompleteLeaseOfAWorkerThatLeftIsSettled) {
  LeasePool pool(Opts(20, 10, 1, 1));
  const Lease a = *pool.Next(0, 0);
  const Lease b = *pool.Next(1, 0);
  pool.Confirm(0, Applied(0, a.id, 1));
  EXPECT_EQ(pool.first_id(), 1);
  EXPECT_EQ(pool.Release(0), 0);  // nothing to hand on: a is complete
  EXPECT_EQ(pool.first_id(), b.id);
  // b's holder leaves before pushing it: b goes back to the pool, kept.
  EXPECT_EQ(pool.Release(1), 1);
  EXPECT_EQ(pool.first_id(), b.id);
  EXPECT_EQ(pool.Next(2, 0)->id, b.id);
}

// A stream's pool: one epoch over the records ready so far, waiting for more, done only once the
// stream has ended and every lease is complete; settled leases leave as it goes.
TEST(LeasePoolTest, AStreamWaitsForRecordsAndEndsWithTheStream) {
  LeasePool::Options options = Opts(0, 10, 2, 1);
  options.stream = true;
  LeasePool pool(options);
  EXPECT_TRUE(pool.Next(0, 0)->wait);  // nothing ready
  pool.SetStream(25, false);
  const Lease a = *pool.Next(0, 0);
  const Lease b = *pool.Next(1, 0);
  EXPECT_EQ(a.end, 20);
  EXPECT_EQ(b.begin, 20);
  EXPECT_EQ(b.end, 25);  // cut short at the ready end
  Complete(&pool, 0, a);
  Complete(&pool, 1, b);
  // All ready records trained: wait, not epoch_done, while the stream goes on.
  absl::StatusOr<Lease> next = pool.Next(0, 0);
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->wait);
  EXPECT_FALSE(next->epoch_done);
  EXPECT_FALSE(pool.EpochTrained(0));
  EXPECT_EQ(pool.num_kept(), 0);
  EXPECT_EQ(pool.SettledPosition(), 25);
  pool.SetStream(10, false);  // never fewer
  EXPECT_TRUE(pool.Next(0, 0)->wait);
  pool.SetStream(40, false);
  const Lease c = *pool.Next(1, 0);
  EXPECT_EQ(c.begin, 25);
  EXPECT_EQ(c.end, 40);
  EXPECT_EQ(c.id, 3);
  pool.SetStream(40, true);
  EXPECT_TRUE(pool.Next(0, 0)->wait);  // c is out
  Complete(&pool, 1, c);
  EXPECT_TRUE(pool.Next(0, 0)->epoch_done);
  EXPECT_TRUE(pool.EpochTrained(0));
  EXPECT_EQ(pool.SettledPosition(), 40);
}

TEST(LeasePoolTest, HeldFreshLeasesWaitWhileRemaindersGoOutAndANewServerCountConfirmsAfter) {
  // 60 samples in leases of one batch of 10, on 2 servers; a change of the server count holds
  // fresh leases back until every lease out is complete, then 3 servers confirm.
  LeasePool::Options options = Opts(60, 10, 1, 2);
  options.num_servers = 2;
  LeasePool pool(options);
  const Lease a = *pool.Next(0, 0);
  const Lease b = *pool.Next(1, 0);
  pool.set_hold_fresh(true);
  const Lease held = *pool.Next(0, 0);
  EXPECT_TRUE(held.wait);
  EXPECT_FALSE(held.epoch_done);
  EXPECT_EQ(pool.num_leases(), 2) << "nothing was cut";
  // Worker 1 leaves with its lease half-applied: its remainder still goes out, so that it completes.
  EXPECT_EQ(pool.Release(1), 1);
  const Lease remainder = *pool.Next(0, 0);
  EXPECT_EQ(remainder.id, b.id);
  EXPECT_EQ(pool.num_incomplete(), 2);
  for (const Lease& l : {a, remainder}) {
    const ProgressReport done = Progress(0, 0, l.id, 1);
    ASSERT_TRUE(pool.Check(done).ok());
    pool.Record(done);
    for (int server : {0, 1}) pool.Confirm(server, Applied(done));
  }
  EXPECT_EQ(pool.num_incomplete(), 0);
  pool.SetNumServers(3);
  EXPECT_EQ(pool.num_servers(), 3);
  EXPECT_EQ(pool.ReportFrom(2), pool.num_leases() + 1) << "nothing of the old leases to confirm";
  pool.set_hold_fresh(false);
  const Lease c = *pool.Next(0, 0);
  ASSERT_GT(c.id, 0);
  EXPECT_EQ(c.begin, 20);
  const ProgressReport done = Progress(0, 0, c.id, 1);
  pool.Record(done);
  EXPECT_TRUE(pool.Confirm(0, Applied(done)).empty());
  EXPECT_TRUE(pool.Confirm(1, Applied(done)).empty()) << "the new server has not confirmed yet";
  EXPECT_EQ(pool.Confirm(2, Applied(done)).size(), 1u);
  // Shrinking: rank 2's confirmations are skipped from then on.
  pool.SetNumServers(2);
  int skipped = 0;
  const Lease d = *pool.Next(0, 0);
  const ProgressReport d_done = Progress(0, 0, d.id, 1);
  pool.Record(d_done);
  pool.Confirm(2, Applied(d_done), &skipped);
  EXPECT_EQ(skipped, 1);
  pool.Confirm(0, Applied(d_done));
  EXPECT_EQ(pool.Confirm(1, Applied(d_done)).size(), 1u);
}

}  // namespace
}  // namespace pstrain::scheduler
