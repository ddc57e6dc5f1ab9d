#include "scheduler/membership.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

Membership::Options TwoAndTwo() {
  Membership::Options o;
  o.num_servers = 2;
  o.num_workers = 2;
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

TEST(MembershipTest, ReRegisteringTheSameAddressReturnsTheSameRank) {
  Membership m(TwoAndTwo());
  ASSERT_EQ(*m.Register(SERVER, "127.0.0.1:4001", kT0), 0);
  ASSERT_EQ(*m.Register(SERVER, "127.0.0.1:4002", kT0), 1);
  const int64_t epoch = m.epoch();
  EXPECT_EQ(*m.Register(SERVER, "127.0.0.1:4001", kT0), 0);
  EXPECT_EQ(*m.Register(SERVER, "127.0.0.1:4002", kT0), 1);
  EXPECT_EQ(m.epoch(), epoch);
  EXPECT_EQ(m.num_registered(SERVER), 2);
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
  EXPECT_EQ(m.Register(WORKER, "", "host/19/xyz", kT0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*m.Register(WORKER, "", "host/18/def", kT0), 1);
}

TEST(MembershipTest, TooManyIsFailedPrecondition) {
  Membership m(TwoAndTwo());
  ASSERT_TRUE(m.Register(WORKER, "a:1", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "a:2", kT0).ok());
  absl::StatusOr<int> third = m.Register(WORKER, "a:3", kT0);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(third.status().message().find("job already has 2 workers"), absl::string_view::npos)
      << third.status();
}

TEST(MembershipTest, RejectsBadRolesAndServersWithoutAddress) {
  Membership m(TwoAndTwo());
  EXPECT_EQ(m.Register(ROLE_UNSPECIFIED, "a:1", kT0).status().code(),
            absl::StatusCode::kInvalidArgument);
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
  EXPECT_FALSE(m.complete());
  EXPECT_EQ(m.View().state(), WAITING_FOR_ROLES);
  ASSERT_TRUE(m.Register(WORKER, "h:5002", kT0).ok());
  EXPECT_TRUE(m.complete());

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
  const std::vector<std::string> dead = m.FindDead(kT0 + absl::Milliseconds(3200));
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0], "worker 1 at 127.0.0.1:4567 sent no heartbeat for 3.2 s");

  EXPECT_EQ(m.FindDead(kT0 + absl::Milliseconds(5100)).size(), 3u);
}

TEST(MembershipTest, FindsRolesThatNeverStartedHeartbeating) {
  Membership m(TwoAndTwo());
  ASSERT_TRUE(m.Register(SERVER, "127.0.0.1:4001", kT0).ok());
  ASSERT_TRUE(m.Register(WORKER, "127.0.0.1:5001", kT0 + absl::Seconds(5)).ok());
  ASSERT_TRUE(m.Heartbeat(WORKER, 0, kT0 + absl::Seconds(6)).ok());
  EXPECT_TRUE(m.FindNeverStarted(kT0 + absl::Seconds(10), absl::Seconds(10)).empty());
  const std::vector<std::string> silent = m.FindNeverStarted(kT0 + absl::Seconds(12), absl::Seconds(10));
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0], "server 0 at 127.0.0.1:4001 sent no heartbeat in the 12.0 s since it registered");
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

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
