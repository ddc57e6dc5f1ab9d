#include "scheduler/membership.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

Membership::Options TwoAndTwo() {
  Membership::Options o;
  o.num_servers = 2;
  o.num_workers = 2;
  o.global_batch = 20;  // batch_size 10 x 2 workers
  o.dead_after = absl::Seconds(3);
  o.shard_map.set_version(1);
  o.train_samples = 600;
  o.test_samples = 100;
  o.total_steps = 50;
  return o;
}

TEST(MembershipTest, RanksFollowRegistrationOrderPerRole) {
  Membership m(TwoAndTwo());
  EXPECT_EQ(*m.Register(WORKER, "127.0.0.1:5001", kT0), 0);
  EXPECT_EQ(*m.Register(SERVER, "127.0.0.1:4001", kT0), 0);
  EXPECT_EQ(*m.Register(SERVER, "127.0.0.1:4002", kT0), 1);
  EXPECT_EQ(*m.Register(WORKER, "127.0.0.1:5002", kT0), 1);
}

TEST(MembershipTest, WorkersBeyondMaxWorkersAreRefusedWhileTheJobRuns) {
  Membership::Options o = TwoAndTwo();
  o.max_workers = 3;
  Membership m(o);
  ASSERT_TRUE(m.Register(SERVER, "127.0.0.1:4001", kT0).ok());
  ASSERT_TRUE(m.Register(SERVER, "127.0.0.1:4002", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "127.0.0.1:5001", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "127.0.0.1:5002", kT0).ok());
  ASSERT_TRUE(m.running());
  EXPECT_EQ(*m.Register(WORKER, "127.0.0.1:5003", kT0), 2);  // One spare.
  const int64_t epoch = m.epoch();
  absl::StatusOr<int> refused = m.Register(WORKER, "127.0.0.1:5004", kT0);
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("at most 3 live workers"), std::string::npos) << refused.status();
  EXPECT_EQ(m.epoch(), epoch);  // Nothing changed.
  EXPECT_EQ(m.num_live(WORKER), 3);
  // A departure frees a place.
  ASSERT_TRUE(m.Remove(WORKER, 0, ChangeKind::kLeft, kT0).ok());
  EXPECT_EQ(*m.Register(WORKER, "127.0.0.1:5004", kT0), 3);
}

TEST(MembershipTest, ReRegisteringTheSameAddressReturnsTheSameRank) {
  Membership m(TwoAndTwo());
  ASSERT_EQ(*m.Register(SERVER, "127.0.0.1:4001", kT0), 0);
  ASSERT_EQ(*m.Register(SERVER, "127.0.0.1:4002", kT0), 1);
  const int64_t epoch = m.epoch();
  EXPECT_EQ(*m.Register(SERVER, "127.0.0.1:4001", kT0), 0);
  EXPECT_EQ(*m.Register(SERVER, "127.0.0.1:4002", kT0), 1);
  EXPECT_EQ(m.epoch(), epoch);
  EXPECT_EQ(m.num_live(SERVER), 2);
}

TEST(MembershipTest, AServerRestartedAtItsAddressWaitsUntilItsPredecessorIsDead) {
  Membership m(TwoAndTwo());
  ASSERT_TRUE(m.Register(SERVER, "h:4001", "old-0", kT0).ok());
  ASSERT_TRUE(m.Register(SERVER, "h:4002", "old-1", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "", "w0", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "", "w1", kT0).ok());
  ASSERT_TRUE(m.running());
  EXPECT_EQ(*m.Register(SERVER, "h:4001", "old-0", kT0), 0);  // its own retry
  absl::StatusOr<int> early = m.Register(SERVER, "h:4001", "new-0", kT0 + absl::Seconds(1));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition) << early.status();
  EXPECT_EQ(m.num_live(SERVER), 2);
  ASSERT_TRUE(*m.Remove(SERVER, 0, ChangeKind::kDied, kT0 + absl::Seconds(4)));
  absl::StatusOr<int> later = m.Register(SERVER, "h:4001", "new-0", kT0 + absl::Seconds(5));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(*later, 0);
  EXPECT_EQ(m.InstanceOf(SERVER, 0).value_or(""), "new-0");
}

TEST(MembershipTest, WorkersWithoutAddressGetFreshRanks) {
  Membership m(TwoAndTwo());
  EXPECT_EQ(*m.Register(WORKER, "", kT0), 0);
  EXPECT_EQ(*m.Register(WORKER, "", kT0), 1);
}

TEST(MembershipTest, RetriedRegistrationOfOneProcessKeepsItsRank) {
  Membership m(TwoAndTwo());
  EXPECT_EQ(*m.Register(WORKER, "", "host/17/abc", kT0), 0);
  EXPECT_EQ(*m.Register(WORKER, "", "host/17/abc", kT0), 0);  // The retry of a lost answer.
  EXPECT_EQ(*m.Register(WORKER, "", "host/18/def", kT0), 1);
  // Both slots are taken by distinct processes; a third is refused, a retry is still answered.
  EXPECT_EQ(m.Register(WORKER, "", "host/19/xyz", kT0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*m.Register(WORKER, "", "host/18/def", kT0), 1);
}

TEST(MembershipTest, TooManyIsFailedPrecondition) {
  Membership m(TwoAndTwo());
  ASSERT_TRUE(m.Register(WORKER, "a:1", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "a:2", kT0).ok());
  absl::StatusOr<int> third = m.Register(WORKER, "a:3", kT0);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(third.status().message().find("job already has 2 workers"), absl::string_view::npos) << third.status();
}

TEST(MembershipTest, RejectsBadRolesAndServersWithoutAddress) {
  Membership m(TwoAndTwo());
  EXPECT_EQ(m.Register(ROLE_UNSPECIFIED, "a:1", kT0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(SERVER, "", kT0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MembershipTest, ViewIsCompleteOnceEveryoneRegistered) {
  Membership m(TwoAndTwo());
  EXPECT_EQ(m.epoch(), 1);
  ClusterView view = m.View();
  EXPECT_EQ(view.state(), WAITING_FOR_ROLES);
  EXPECT_EQ(view.membership_epoch(), 1);

  ASSERT_TRUE(m.Register(SERVER, "h:4002", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "h:5001", kT0).ok());
  ASSERT_TRUE(m.Register(SERVER, "h:4001", kT0).ok());
  EXPECT_FALSE(m.running());
  EXPECT_EQ(m.View().state(), WAITING_FOR_ROLES);
  ASSERT_TRUE(m.Register(WORKER, "h:5002", kT0).ok());
  EXPECT_TRUE(m.running());

  view = m.View();
  EXPECT_EQ(view.state(), RUNNING);
  EXPECT_EQ(view.membership_epoch(), 5);  // 1 + four registrations.
  ASSERT_EQ(view.servers_size(), 2);
  EXPECT_EQ(view.servers(0).rank(), 0);
  EXPECT_EQ(view.servers(0).address(), "h:4002");
  EXPECT_EQ(view.servers(1).rank(), 1);
  EXPECT_EQ(view.servers(1).address(), "h:4001");
  ASSERT_EQ(view.workers_size(), 2);
  EXPECT_EQ(view.workers(1).address(), "h:5002");
  EXPECT_EQ(view.shard_map().version(), 1);
  EXPECT_EQ(view.train_samples(), 600);
  EXPECT_EQ(view.test_samples(), 100);
  EXPECT_EQ(view.total_steps(), 50);
  EXPECT_EQ(view.global_batch(), 20);  // The job's global batch.
  // Registrations before the start are not churn.
  EXPECT_TRUE(m.events().empty());
}

TEST(MembershipTest, FindsRolesSilentLongerThanDeadAfter) {
  Membership m(TwoAndTwo());
  ASSERT_TRUE(m.Register(SERVER, "127.0.0.1:4001", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "127.0.0.1:5001", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "127.0.0.1:4567", kT0).ok());
  // Not watched before their first heartbeat.
  EXPECT_TRUE(m.FindDead(kT0 + absl::Seconds(10)).empty());
  ASSERT_TRUE(m.Heartbeat(SERVER, 0, kT0).ok());
  ASSERT_TRUE(m.Heartbeat(WORKER, 0, kT0).ok());
  ASSERT_TRUE(m.Heartbeat(WORKER, 1, kT0).ok());
  EXPECT_TRUE(m.FindDead(kT0 + absl::Seconds(3)).empty());

  ASSERT_TRUE(m.Heartbeat(SERVER, 0, kT0 + absl::Seconds(2)).ok());
  ASSERT_TRUE(m.Heartbeat(WORKER, 0, kT0 + absl::Seconds(2)).ok());
  const std::vector<SilentMember> dead = m.FindDead(kT0 + absl::Milliseconds(3200));
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].message, "worker 1 at 127.0.0.1:4567 sent no heartbeat for 3.2 s");
  EXPECT_EQ(dead[0].role, WORKER);
  EXPECT_EQ(dead[0].rank, 1);

  EXPECT_EQ(m.FindDead(kT0 + absl::Milliseconds(5100)).size(), 3u);
}

TEST(MembershipTest, FindsRolesThatNeverStartedHeartbeating) {
  Membership m(TwoAndTwo());
  ASSERT_TRUE(m.Register(SERVER, "127.0.0.1:4001", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "127.0.0.1:5001", kT0 + absl::Seconds(5)).ok());
  ASSERT_TRUE(m.Heartbeat(WORKER, 0, kT0 + absl::Seconds(6)).ok());
  EXPECT_TRUE(m.FindNeverStarted(kT0 + absl::Seconds(10), absl::Seconds(10)).empty());
  const std::vector<SilentMember> silent = m.FindNeverStarted(kT0 + absl::Seconds(12), absl::Seconds(10));
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].message, "server 0 at 127.0.0.1:4001 sent no heartbeat in the 12.0 s since it registered");
  // A re-registration does not count as a heartbeat.
  ASSERT_TRUE(m.Register(SERVER, "127.0.0.1:4001", kT0 + absl::Seconds(11)).ok());
  EXPECT_EQ(m.FindNeverStarted(kT0 + absl::Seconds(12), absl::Seconds(10)).size(), 1u);
}

TEST(MembershipTest, HeartbeatFromUnknownRankIsFailedPrecondition) {
  Membership m(TwoAndTwo());
  ASSERT_TRUE(m.Register(SERVER, "h:1", kT0).ok());
  EXPECT_TRUE(m.Heartbeat(SERVER, 0, kT0).ok());
  EXPECT_EQ(m.Heartbeat(SERVER, 1, kT0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.Heartbeat(WORKER, 0, kT0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MembershipTest, TracksWhetherServersHeardSince) {
  Membership m(TwoAndTwo());
  ASSERT_TRUE(m.Register(SERVER, "h:1", kT0).ok());
  ASSERT_TRUE(m.Register(SERVER, "h:2", kT0).ok());
  const absl::Time end = kT0 + absl::Seconds(10);
  EXPECT_FALSE(m.AllServersHeardSince(end));
  ASSERT_TRUE(m.Heartbeat(SERVER, 0, end + absl::Seconds(1)).ok());
  EXPECT_FALSE(m.AllServersHeardSince(end));
  ASSERT_TRUE(m.Heartbeat(SERVER, 1, end + absl::Seconds(1)).ok());
  EXPECT_TRUE(m.AllServersHeardSince(end));
}

// Registers 2 servers and 2 workers (ranks 0 and 1) at kT0: the job runs.
Membership Running() {
  Membership m(TwoAndTwo());
  EXPECT_TRUE(m.Register(SERVER, "h:4001", kT0).ok());
  EXPECT_TRUE(m.Register(SERVER, "h:4002", kT0).ok());
  EXPECT_TRUE(m.Register(WORKER, "", "w0", kT0).ok());
  EXPECT_TRUE(m.Register(WORKER, "", "w1", kT0).ok());
  EXPECT_TRUE(m.running());
  return m;
}

std::vector<int> ViewWorkerRanks(const ClusterView& view) {
  std::vector<int> ranks;
  for (const WorkerInfo& w : view.workers()) ranks.push_back(w.rank());
  return ranks;
}

TEST(MembershipTest, RemovedWorkerLeavesTheViewAndBumpsTheEpochOnce) {
  Membership m = Running();
  const int64_t epoch = m.epoch();
  absl::StatusOr<bool> removed = m.Remove(WORKER, 0, ChangeKind::kDied, kT0 + absl::Seconds(4));
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(*removed);
  EXPECT_EQ(m.epoch(), epoch + 1);
  // Idempotent: a second removal (a Leave after the death) changes nothing.
  removed = m.Remove(WORKER, 0, ChangeKind::kLeft, kT0 + absl::Seconds(5));
  ASSERT_TRUE(removed.ok());
  EXPECT_FALSE(*removed);
  EXPECT_EQ(m.epoch(), epoch + 1);

  const ClusterView view = m.View();
  EXPECT_EQ(view.state(), RUNNING);
  EXPECT_EQ(view.membership_epoch(), epoch + 1);
  EXPECT_EQ(ViewWorkerRanks(view), std::vector<int>{1});
  EXPECT_EQ(view.global_batch(), 20);  // Fixed for the job, whoever is live.
  EXPECT_EQ(view.servers_size(), 2);
  EXPECT_EQ(m.num_live(WORKER), 1);
  EXPECT_FALSE(m.is_live(WORKER, 0));
  EXPECT_TRUE(m.ever_registered(WORKER, 0));
  EXPECT_EQ(m.LiveRanks(WORKER), std::vector<int>{1});

  ASSERT_EQ(m.events().size(), 1u);
  EXPECT_EQ(m.events()[0].at, kT0 + absl::Seconds(4));
  EXPECT_EQ(m.events()[0].role, WORKER);
  EXPECT_EQ(m.events()[0].rank, 0);
  EXPECT_EQ(m.events()[0].kind, ChangeKind::kDied);
  EXPECT_EQ(m.events()[0].epoch, epoch + 1);
}

TEST(MembershipTest, RemovedWorkerIsNeitherDeadAgainNorAllowedToHeartbeat) {
  Membership m = Running();
  ASSERT_TRUE(m.Heartbeat(WORKER, 0, kT0).ok());
  ASSERT_TRUE(m.Heartbeat(WORKER, 1, kT0).ok());
  ASSERT_EQ(m.FindDead(kT0 + absl::Seconds(4)).size(), 2u);
  ASSERT_TRUE(m.Remove(WORKER, 1, ChangeKind::kDied, kT0 + absl::Seconds(4)).ok());
  ASSERT_TRUE(m.Remove(WORKER, 0, ChangeKind::kLeft, kT0 + absl::Seconds(4)).ok());
  EXPECT_TRUE(m.FindDead(kT0 + absl::Seconds(10)).empty());
  EXPECT_TRUE(m.FindNeverStarted(kT0 + absl::Seconds(1000), absl::Seconds(10)).size() == 2u);  // Servers.

  absl::Status hb = m.Heartbeat(WORKER, 1, kT0 + absl::Seconds(5));
  EXPECT_EQ(hb.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(hb.message().substr(0, 30), "worker 1 is no longer a member") << hb;
  EXPECT_NE(hb.message().find("declared dead"), absl::string_view::npos) << hb;
  hb = m.Heartbeat(WORKER, 0, kT0 + absl::Seconds(5));
  EXPECT_NE(hb.message().find("it left"), absl::string_view::npos) << hb;
}

TEST(MembershipTest, ARemovedServersRankIsTakenByTheNextServerWhileRunning) {
  Membership m = Running();
  const int64_t epoch = m.epoch();
  ASSERT_TRUE(*m.Remove(SERVER, 1, ChangeKind::kDied, kT0 + absl::Seconds(4)));
  ClusterView view = m.View();
  EXPECT_EQ(view.state(), RUNNING);
  ASSERT_EQ(view.servers_size(), 1);
  EXPECT_EQ(view.servers(0).rank(), 0);
  EXPECT_EQ(m.epoch(), epoch + 1);
  EXPECT_EQ(m.Heartbeat(SERVER, 1, kT0 + absl::Seconds(5)).code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<int> rank = m.Register(SERVER, "h:4009", kT0 + absl::Seconds(6));
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 1);
  EXPECT_EQ(m.epoch(), epoch + 2);
  view = m.View();
  ASSERT_EQ(view.servers_size(), 2);
  EXPECT_EQ(view.servers(1).address(), "h:4009");
  // Every rank is taken again.
  EXPECT_EQ(m.Register(SERVER, "h:4010", kT0 + absl::Seconds(7)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(m.events().size(), 2u);
  EXPECT_EQ(m.events()[0].role, SERVER);
  EXPECT_EQ(m.events()[0].kind, ChangeKind::kDied);
  EXPECT_EQ(m.events()[1].role, SERVER);
  EXPECT_EQ(m.events()[1].rank, 1);
  EXPECT_EQ(m.events()[1].kind, ChangeKind::kJoined);
  EXPECT_EQ(m.events()[1].epoch, epoch + 2);
}

TEST(MembershipTest, ServersOutsideTheShardMapComeAndGoWithoutANewEpoch) {
  Membership m = Running();
  const int64_t epoch = m.epoch();
  const int64_t changes = m.changes();
  // A scale-up to 3 admits rank 2 before the cut-over: it serves no request, so no route changes.
  m.SetServerSlots(3);
  absl::StatusOr<int> added = m.Register(SERVER, "h:4003", kT0 + absl::Seconds(1));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 2);
  EXPECT_EQ(m.epoch(), epoch);
  EXPECT_EQ(m.changes(), changes + 1);
  EXPECT_EQ(m.View().servers_size(), 3);
  // The cut-over's map has it: from now on its departure is a new epoch.
  ShardMap three;
  three.set_version(2);
  three.set_num_servers(3);
  m.ChangeShardMap(three);
  EXPECT_EQ(m.epoch(), epoch + 1);
  ShardMap two;
  two.set_version(3);
  two.set_num_servers(2);
  m.ChangeShardMap(two);  // drained by a scale-down: outside the map again
  EXPECT_EQ(m.epoch(), epoch + 2);
  ASSERT_TRUE(*m.Remove(SERVER, 2, ChangeKind::kLeft, kT0 + absl::Seconds(2)));
  EXPECT_EQ(m.epoch(), epoch + 2);
  EXPECT_EQ(m.changes(), changes + 2);
  EXPECT_EQ(m.View().servers_size(), 2);
  // A server of the map dying is a new epoch as before.
  ASSERT_TRUE(*m.Remove(SERVER, 1, ChangeKind::kDied, kT0 + absl::Seconds(3)));
  EXPECT_EQ(m.epoch(), epoch + 3);
}

TEST(MembershipTest, RemoveRejectsUnknownMembersAndJoinedKind) {
  Membership m = Running();
  EXPECT_EQ(m.Remove(WORKER, 2, ChangeKind::kDied, kT0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.Remove(ROLE_UNSPECIFIED, 0, ChangeKind::kDied, kT0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.Remove(WORKER, 0, ChangeKind::kJoined, kT0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.num_live(WORKER), 2);
}

TEST(MembershipTest, JoinWhileRunningTakesARankNeverUsedBefore) {
  Membership m = Running();
  ASSERT_TRUE(m.Remove(WORKER, 0, ChangeKind::kDied, kT0 + absl::Seconds(1)).ok());
  const int64_t epoch = m.epoch();
  // The dead worker's rank is not reused: a stale process under rank 0 stays refused...
  absl::StatusOr<int> rank = m.Register(WORKER, "", "w2", kT0 + absl::Seconds(2));
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 2);
  EXPECT_EQ(m.epoch(), epoch + 1);
  EXPECT_EQ(m.Heartbeat(WORKER, 0, kT0 + absl::Seconds(2)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(m.is_live(WORKER, 0));
  // ...and the job grows beyond num_workers.
  EXPECT_EQ(*m.Register(WORKER, "", "w3", kT0 + absl::Seconds(3)), 3);
  EXPECT_EQ(*m.Register(WORKER, "", "w4", kT0 + absl::Seconds(3)), 4);
  EXPECT_EQ(m.epoch(), epoch + 3);
  // A retry of a live worker's registration keeps its rank and the epoch.
  EXPECT_EQ(*m.Register(WORKER, "", "w3", kT0 + absl::Seconds(4)), 3);
  EXPECT_EQ(m.epoch(), epoch + 3);
  EXPECT_EQ(ViewWorkerRanks(m.View()), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(m.View().global_batch(), 20);
  // Servers stay bounded.
  EXPECT_EQ(m.Register(SERVER, "h:4003", kT0).status().code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_EQ(m.events().size(), 4u);
  EXPECT_EQ(m.events()[1].kind, ChangeKind::kJoined);
  EXPECT_EQ(m.events()[1].rank, 2);
  EXPECT_EQ(m.events()[3].rank, 4);
  EXPECT_STREQ(ChangeKindName(m.events()[0].kind), "died");
  EXPECT_STREQ(ChangeKindName(m.events()[1].kind), "joined");
  EXPECT_STREQ(ChangeKindName(ChangeKind::kLeft), "left");
}

TEST(MembershipTest, ARemovedProcessRegisteringAgainIsANewMember) {
  Membership m = Running();
  ASSERT_TRUE(m.Remove(WORKER, 1, ChangeKind::kDied, kT0).ok());
  EXPECT_FALSE(m.Lookup(WORKER, "", "w1").has_value());
  const int64_t epoch = m.epoch();
  EXPECT_EQ(*m.Register(WORKER, "", "w1", kT0), 2);
  EXPECT_EQ(m.epoch(), epoch + 1);
  EXPECT_TRUE(m.is_live(WORKER, 2));
  EXPECT_FALSE(m.is_live(WORKER, 1));
  EXPECT_EQ(m.Lookup(WORKER, "", "w1"), 2);
}

TEST(MembershipTest, BeforeTheStartALeavingWorkerFreesItsSlot) {
  Membership m(TwoAndTwo());
  ASSERT_EQ(*m.Register(WORKER, "", "a", kT0), 0);
  ASSERT_EQ(*m.Register(WORKER, "", "b", kT0), 1);
  EXPECT_EQ(m.Register(WORKER, "", "c", kT0).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.Remove(WORKER, 0, ChangeKind::kLeft, kT0).ok());
  EXPECT_EQ(*m.Register(WORKER, "", "c", kT0), 2);
  EXPECT_FALSE(m.running());
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain

namespace pstrain::scheduler {
namespace {

TEST(MembershipTest, JoinAndLeaveWithoutEndKeepsTheNewestEventsOnly) {
  Membership::Options o = TwoAndTwo();
  o.num_servers = 0;
  o.num_workers = 1;
  Membership m(o);
  ASSERT_TRUE(m.Register(WORKER, "127.0.0.1:5000", kT0).ok());
  for (int i = 1; i <= 3000; ++i) {
    absl::StatusOr<int> rank = m.Register(WORKER, absl::StrCat("127.0.0.1:", 6000 + i), kT0 + absl::Seconds(i));
    ASSERT_TRUE(rank.ok()) << rank.status();
    ASSERT_TRUE(m.Remove(WORKER, *rank, ChangeKind::kLeft, kT0 + absl::Seconds(i)).ok());
  }
  EXPECT_LE(m.events().size(), Membership::kMaxEvents);
  EXPECT_EQ(m.events().back().at, kT0 + absl::Seconds(3000));
  // Only the newest gone workers are remembered: the state and the dashboard stay bounded.
  EXPECT_EQ(m.Members(kT0, kT0).size(), 1u + Membership::kMaxGoneWorkers);
  EXPECT_EQ(m.forgotten_workers(), 3000 - Membership::kMaxGoneWorkers);
  const MembershipState saved = m.ToProto();
  EXPECT_EQ(saved.workers_size(), 1 + Membership::kMaxGoneWorkers);
  EXPECT_LT(saved.ByteSizeLong(), 100000u);
  // A forgotten worker's rank stays used, and it is still refused.
  EXPECT_TRUE(m.ever_registered(WORKER, 1));
  EXPECT_FALSE(m.is_live(WORKER, 1));
  EXPECT_EQ(m.Describe(WORKER, 1), "worker 1");
  EXPECT_EQ(m.Heartbeat(WORKER, 1, kT0).message(),
            "worker 1 is no longer a member of the job: it left or died long ago (membership epoch 6002)");
  EXPECT_FALSE(*m.Remove(WORKER, 1, ChangeKind::kDied, kT0));
  EXPECT_EQ(m.Describe(WORKER, 3000), "worker 3000 at 127.0.0.1:9000");
  // A restored membership goes on with the next rank, not with the number of members it lists.
  Membership restored(o);
  ASSERT_TRUE(restored.Restore(saved, kT0).ok());
  EXPECT_EQ(restored.ToProto().SerializeAsString(), saved.SerializeAsString());
  EXPECT_EQ(*restored.Register(WORKER, "127.0.0.1:7000", kT0), 3001);
  EXPECT_TRUE(restored.is_live(WORKER, 0));
}

TEST(MembershipTest, AStateWithoutRanksIndexesItsMembersByRank) {
  // As written before MemberState.rank: workers 0 (gone) and 1 (live), no next_worker_rank.
  Membership::Options o = TwoAndTwo();
  o.num_servers = 0;
  o.num_workers = 1;
  MembershipState old;
  old.set_epoch(4);
  old.set_running(true);
  old.add_workers()->set_address("h:1");
  old.mutable_workers(0)->set_removed(MEMBER_LEFT);
  MemberState* live = old.add_workers();
  live->set_address("h:2");
  live->set_live(true);
  Membership m(o);
  ASSERT_TRUE(m.Restore(old, kT0).ok());
  EXPECT_EQ(m.LiveRanks(WORKER), std::vector<int>{1});
  EXPECT_EQ(m.Describe(WORKER, 0), "worker 0 at h:1");
  EXPECT_EQ(*m.Register(WORKER, "h:3", kT0), 2);
}

TEST(MembershipTest, AStateWithBadWorkerRanksIsRefusedAndChangesNothing) {
  Membership::Options o = TwoAndTwo();
  o.num_servers = 0;
  o.num_workers = 1;
  MembershipState bad;
  bad.set_epoch(4);
  bad.set_running(true);
  bad.set_next_worker_rank(3);
  for (int i = 0; i < 2; ++i) {
    MemberState* w = bad.add_workers();
    w->set_rank(1);
    w->set_live(true);
  }
  Membership m(o);
  absl::Status refused = m.Restore(bad, kT0);
  EXPECT_EQ(std::string(refused.message()), "scheduler state, membership, worker 1: the rank is listed twice");
  bad.mutable_workers(1)->set_rank(3);
  refused = m.Restore(bad, kT0);
  EXPECT_EQ(std::string(refused.message()),
            "scheduler state, membership, worker 3: rank not handed out yet (next_worker_rank 3)");
  EXPECT_EQ(m.epoch(), 1);
  EXPECT_EQ(*m.Register(WORKER, "h:1", kT0), 0);
}

}  // namespace
}  // namespace pstrain::scheduler
