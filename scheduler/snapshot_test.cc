// Each component's persistent form (scheduler/snapshot.cc) round-trips: restored into a fresh
// object it gives the same proto again and behaves as the original would.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "data/score_histogram.h"
#include "data/score_histogram_proto.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "scheduler/barrier.h"
#include "scheduler/eval_pool.h"
#include "scheduler/lease_pool.h"
#include "scheduler/membership.h"
#include "scheduler/progress.h"

namespace pstrain {
namespace scheduler {
namespace {

using ::google::protobuf::util::MessageDifferencer;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(SnapshotTest, MembershipRoundTripsAndRestoredMembersGetAFreshGracePeriod) {
  Membership::Options o;
  o.num_servers = 1;
  o.num_workers = 2;
  o.dead_after = absl::Seconds(3);
  Membership m(o);
  ASSERT_TRUE(m.Register(SERVER, "h:1", "s", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "", "w0", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "", "w1", kT0).ok());
  ASSERT_TRUE(m.Heartbeat(WORKER, 0, kT0).ok());
  ASSERT_TRUE(m.Heartbeat(WORKER, 1, kT0).ok());
  ASSERT_TRUE(m.Remove(WORKER, 1, ChangeKind::kDied, kT0 + absl::Seconds(4)).value());
  m.SetMetricsAddress(SERVER, 0, "h:9101");
  const MembershipState saved = m.ToProto();

  Membership restored(o);
  const absl::Time restart = kT0 + absl::Seconds(60);
  ASSERT_TRUE(restored.Restore(saved, restart).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(restored.ToProto(), saved));
  EXPECT_EQ(restored.epoch(), m.epoch());
  const std::vector<MemberStatus> members = restored.Members(restart, kT0);
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].metrics_address, "h:9101");
  EXPECT_EQ(members[2].state, "dead");
  EXPECT_EQ(restored.LiveRanks(WORKER), std::vector<int>({0}));
  ASSERT_EQ(restored.events().size(), 1u);
  // Worker 0 last heartbeated a minute ago, but has dead_after from the restart.
  EXPECT_TRUE(restored.FindDead(restart + absl::Seconds(2)).empty());
  EXPECT_EQ(restored.FindDead(restart + absl::Seconds(4)).size(), 1u);
  // Retried registrations keep their ranks.
  EXPECT_EQ(restored.Register(WORKER, "", "w0", restart).value(), 0);
  EXPECT_EQ(restored.Register(SERVER, "h:1", "s", restart).value(), 0);
}

TEST(SnapshotTest, MembershipKeepsLiveServersBeyondTheMapAndRefusesARankListedTwice) {
  Membership::Options o;
  o.num_servers = 1;
  MembershipState state;
  state.set_epoch(3);
  state.set_next_worker_rank(1);
  // Rank 1 is outside the 1-server map: a scale-down drained it and it has not left yet.
  for (int rank : {0, 1}) {
    MemberState* server = state.add_servers();
    server->set_rank(rank);
    server->set_address(absl::StrCat("h:", 4000 + rank));
    server->set_live(true);
  }
  Membership kept(o);
  ASSERT_TRUE(kept.Restore(state, kT0).ok());
  EXPECT_TRUE(kept.is_live(SERVER, 1));
  ASSERT_TRUE(*kept.Remove(SERVER, 1, ChangeKind::kLeft, kT0));
  EXPECT_EQ(kept.epoch(), 3);  // it served no request: no route changed

  state.mutable_servers(1)->set_rank(0);
  Membership m(o);
  absl::Status s = m.Restore(state, kT0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the rank is listed twice"), std::string::npos) << s;
  EXPECT_EQ(m.epoch(), 1);  // Unchanged.
}

TEST(SnapshotTest, LeasePoolRoundTripsWithARemainderAndGoesOnAsTheOriginal) {
  LeasePool::Options o;
  o.train_samples = 100;
  o.batch_size = 10;
  o.lease_batches = 2;
  o.epochs = 2;
  LeasePool pool(o);
  const Lease a = *pool.Next(0, 0);
  const Lease b = *pool.Next(1, 0);
  ProgressReport r;
  r.set_worker_rank(1);
  r.set_epoch(0);
  LeaseProgress* p = r.add_leases();
  p->set_lease_id(b.id);
  p->set_batches_done(1);
  ASSERT_TRUE(pool.Check(r).ok());
  pool.Record(r);
  AppliedLeases applied;  // The server confirms that batch.
  applied.add_lease_ids(b.id);
  applied.add_batches(1);
  EXPECT_TRUE(pool.Confirm(0, applied).empty());
  ASSERT_EQ(pool.Release(1), 1);  // b is a remainder from batch 1.
  const LeasePoolState saved = pool.ToProto();

  LeasePool restored(o);
  ASSERT_TRUE(restored.Restore(saved).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(restored.ToProto(), saved));
  for (LeasePool* each : {&pool, &restored}) {
    const Lease rest = *each->Next(0, 0);  // The remainder first, then fresh leases.
    EXPECT_EQ(rest.id, b.id);
    EXPECT_EQ(rest.first_batch, 1);
    EXPECT_EQ(each->Next(0, 0)->begin, 40);
  }
  EXPECT_NE(a.id, b.id);
}

TEST(SnapshotTest, LeasePoolStateWithoutConfirmationsCountsTheReportsAndWrongCountsAreRefused) {
  LeasePool::Options o;
  o.train_samples = 40;
  o.batch_size = 10;
  o.lease_batches = 2;
  o.num_servers = 2;
  LeasePool pool(o);
  ASSERT_TRUE(pool.Next(0, 0).ok());
  ASSERT_TRUE(pool.Next(1, 0).ok());
  LeasePoolState old = pool.ToProto();
  for (LeaseState& l : *old.mutable_leases()) {
    l.clear_applied();  // As written before servers confirmed leases.
    l.clear_done();
  }
  old.mutable_leases(0)->set_batches_done(2);
  LeasePool restored(o);
  ASSERT_TRUE(restored.Restore(old).ok());
  EXPECT_TRUE(restored.lease(1).complete());
  EXPECT_FALSE(restored.lease(2).complete());
  EXPECT_EQ(restored.lease(1).applied, (std::vector<int64_t>{2, 2}));

  LeasePoolState wrong = pool.ToProto();
  wrong.mutable_leases(1)->add_applied(0);  // Three servers' counts.
  absl::Status s = restored.Restore(wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("3 servers' confirmations, the job has 2 servers"), std::string::npos) << s;
  wrong = pool.ToProto();
  wrong.mutable_leases(1)->set_applied(0, 5);
  s = restored.Restore(wrong);
  EXPECT_NE(s.message().find("5 batches applied on a server, expected 0..2"), std::string::npos) << s;
  EXPECT_TRUE(restored.lease(1).complete());  // Unchanged by the refused states.
}

TEST(SnapshotTest, LeasePoolRefusesLeasesOutOfOrder) {
  LeasePool::Options o;
  o.train_samples = 100;
  LeasePoolState state;
  state.add_leases()->set_id(2);
  LeasePool pool(o);
  absl::Status s = pool.Restore(state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected id 1"), std::string::npos) << s;
}

TEST(SnapshotTest, ProgressAndItsEvaluationPoolRoundTrip) {
  JobSpec job;
  job.set_num_workers(2);
  job.set_epochs(2);
  job.set_batch_size(10);
  ApplyJobDefaults(&job);
  Progress::Options o{job, 20, kT0, /*test_samples=*/40, /*train_samples=*/100, /*global_batch=*/20};
  Progress progress(o);
  progress.Start(kT0);
  ProgressReport r;
  r.set_worker_rank(0);
  r.set_epoch(0);
  r.set_step(3);
  r.mutable_train()->set_samples(30);
  r.mutable_train()->set_steps(3);
  r.mutable_train()->set_loss_sum(12.0);
  ASSERT_TRUE(progress.Add(r, kT0 + absl::Seconds(1)).ok());
  const EvalLease held = *progress.LeaseEval(1, 0, kT0 + absl::Seconds(2));
  const ProgressState saved = progress.ToProto();

  Progress restored(o);
  ASSERT_TRUE(restored.Restore(saved).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(restored.ToProto(), saved));
  const absl::Time now = kT0 + absl::Seconds(3);
  EXPECT_EQ(restored.SummaryJson(RUNNING, "", now), progress.SummaryJson(RUNNING, "", now));
  // The lease out with worker 1 is still out: the next one is another.
  EXPECT_NE(restored.LeaseEval(0, 0, now)->id, held.id);
  // A step counted before the restore is not counted again.
  ASSERT_TRUE(restored.Add(r, now).ok());
  EXPECT_NE(restored.SummaryJson(RUNNING, "", now).find("\"samples\": 60, \"seconds\""), std::string::npos)
      << restored.SummaryJson(RUNNING, "", now);
}

// Lease `lease`'s results with the scores of a CTR model: sample i predicted 1 / (2 + i % 7),
// clicked when i % 3 == 0.
ProgressReport ScoredResult(const EvalLease& lease) {
  ProgressReport r;
  r.set_epoch(lease.epoch);
  EvalStats* e = r.add_evals();
  e->set_lease_id(lease.id);
  e->set_samples(lease.end - lease.begin);
  data::ScoreHistogram h;
  for (int64_t i = lease.begin; i < lease.end; ++i) EXPECT_TRUE(h.Add(1.0 / (2 + i % 7), i % 3 == 0).ok());
  *e->mutable_scores() = data::ScoreHistogramToProto(h);
  return r;
}

TEST(SnapshotTest, AnEpochsMergedScoresSurviveARestoreAndOnlyTheAucStaysOnceComplete) {
  EvalPool::Options o;
  o.test_samples = 40;
  o.num_workers = 1;
  o.epochs = 1;
  EvalPool pool(o);  // Leases of 10.
  std::vector<EvalLease> leases;
  for (int i = 0; i < 4; ++i) leases.push_back(*pool.Next(0, 0));
  pool.Record(ScoredResult(leases[0]));
  pool.Record(ScoredResult(leases[1]));
  const EvalPoolState half = pool.ToProto();
  ASSERT_EQ(half.epochs_size(), 1);
  EXPECT_EQ(half.epochs(0).scores().scored_leases(), 2);
  EXPECT_EQ(half.epochs(0).scores().merged().bins_size(), 7);  // 7 distinct predictions
  EXPECT_FALSE(half.epochs(0).scores().has_auc());
  // A lease's scores are kept once, in the merge, not again with its other results.
  EXPECT_FALSE(half.slots(0).result().has_scores());

  EvalPool restored(o);
  ASSERT_TRUE(restored.Restore(half).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(restored.ToProto(), half));
  for (EvalPool* p : {&pool, &restored}) {
    p->Record(ScoredResult(leases[2]));
    p->Record(ScoredResult(leases[3]));
  }
  data::ScoreHistogram whole;
  for (int64_t i = 0; i < 40; ++i) ASSERT_TRUE(whole.Add(1.0 / (2 + i % 7), i % 3 == 0).ok());
  EXPECT_EQ(restored.scores(0)->auc(), *whole.Auc());
  EXPECT_EQ(restored.scores(0)->error_bound(), *whole.ErrorBound());
  EXPECT_EQ(pool.scores(0)->auc(), restored.scores(0)->auc());

  const EvalPoolState done = restored.ToProto();
  EXPECT_FALSE(done.epochs(0).scores().has_merged());
  EXPECT_TRUE(done.epochs(0).scores().finished());
  EXPECT_EQ(done.epochs(0).scores().auc(), *whole.Auc());
  EvalPool again(o);
  ASSERT_TRUE(again.Restore(done).ok());
  EXPECT_EQ(again.scores(0)->auc(), *whole.Auc());
  EXPECT_EQ(again.scores(0)->error_bound(), *whole.ErrorBound());

  // A damaged histogram in the state is refused, and the pool stays as it was.
  EvalPoolState bad = half;
  bad.mutable_epochs(0)->mutable_scores()->mutable_merged()->set_bins(0, 65536);
  const absl::Status s = again.Restore(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "scheduler state, evaluation scores: score histogram: entry 0 is bin 65536, expected a bin below 65536");
  EXPECT_TRUE(MessageDifferencer::Equals(again.ToProto(), done));
}

TEST(SnapshotTest, ReleasedBarriersStayReleased) {
  BarrierSet barriers;
  BarrierSet::Answers answers;
  barriers.SetParticipants(BarrierRequest::WORKERS, {"worker 0"}, &answers);
  barriers.Enter(
      "epoch-0-trained", BarrierRequest::WORKERS, "worker 0", [](absl::Status) {}, &answers);
  barriers.Enter(
      "epoch-1-trained", BarrierRequest::WORKERS, "worker 1", [](absl::Status) {}, &answers);
  std::vector<BarrierState> released = barriers.Released();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].name(), "epoch-0-trained");

  BarrierSet restored;
  restored.RestoreReleased(released);
  BarrierSet::Answers out;
  absl::Status answer = absl::UnknownError("not answered");
  restored.Enter(
      "epoch-0-trained", BarrierRequest::WORKERS, "worker 0", [&](absl::Status s) { answer = s; }, &out);
  RunAnswers(std::move(out));
  EXPECT_TRUE(answer.ok()) << answer;
  EXPECT_EQ(restored.Released().size(), 1u);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
