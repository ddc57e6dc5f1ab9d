#include "worker/shard_routing.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::worker {
namespace {

using ::testing::HasSubstr;

ClusterView ViewWithServers(std::vector<int> ranks) {
  ClusterView view;
  view.set_membership_epoch(7);
  for (int r : ranks) {
    ServerInfo* s = view.add_servers();
    s->set_rank(r);
    s->set_address("127.0.0.1:" + std::to_string(4000 + r));
  }
  return view;
}

void AddHost(ClusterView* view, int shard, int primary, int backup) {
  ShardHost* h = view->add_shard_hosts();
  h->set_shard(shard);
  h->set_primary(primary);
  if (backup >= 0) h->set_backup(backup);
}

TEST(ShardRoutingTest, WithoutReplicasShardSGoesToServerSOnly) {
  // Also during a checkpoint recovery, when server 1 is missing from the view.
  absl::StatusOr<std::vector<ShardRoute>> routes = ShardRoutes(ViewWithServers({0, 2}), 3);
  ASSERT_TRUE(routes.ok()) << routes.status();
  ASSERT_EQ(routes->size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ((*routes)[s].primary, s);
    EXPECT_EQ((*routes)[s].backup, -1);
  }
}

TEST(ShardRoutingTest, ReplicasSendEachShardToItsPrimaryAndItsCopy) {
  ClusterView view = ViewWithServers({0, 1, 2});
  AddHost(&view, 0, 0, 1);
  AddHost(&view, 1, 1, 2);
  AddHost(&view, 2, 2, 0);
  absl::StatusOr<std::vector<ShardRoute>> routes = ShardRoutes(view, 3);
  ASSERT_TRUE(routes.ok()) << routes.status();
  EXPECT_EQ((*routes)[2].primary, 2);
  EXPECT_EQ((*routes)[2].backup, 0);
}

TEST(ShardRoutingTest, PromotedCopyServesTheDeadServersShardWithoutBackup) {
  ClusterView view = ViewWithServers({0, 2});  // server 1 died
  AddHost(&view, 0, 0, -1);
  AddHost(&view, 1, 2, -1);
  AddHost(&view, 2, 2, 0);
  absl::StatusOr<std::vector<ShardRoute>> routes = ShardRoutes(view, 3);
  ASSERT_TRUE(routes.ok()) << routes.status();
  EXPECT_EQ((*routes)[0].backup, -1);
  EXPECT_EQ((*routes)[1].primary, 2);
  EXPECT_EQ((*routes)[1].backup, -1);
  EXPECT_EQ((*routes)[2].backup, 0);
}

TEST(ShardRoutingTest, HostsOfADeadServerAreRefused) {
  ClusterView view = ViewWithServers({0, 2});
  AddHost(&view, 0, 0, 1);
  AddHost(&view, 1, 1, 2);
  AddHost(&view, 2, 2, 0);
  absl::StatusOr<std::vector<ShardRoute>> routes = ShardRoutes(view, 3);
  EXPECT_EQ(routes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(routes.status().message(), HasSubstr("shard 0 has its copy on server 1, expected a live server"));
}

TEST(ShardRoutingTest, HostsMustListEveryShardInOrder) {
  ClusterView view = ViewWithServers({0, 1});
  AddHost(&view, 1, 1, 0);
  AddHost(&view, 0, 0, 1);
  EXPECT_THAT(ShardRoutes(view, 2).status().message(), HasSubstr("position 0 is for shard 1, expected 0"));
  EXPECT_THAT(ShardRoutes(view, 3).status().message(), HasSubstr("2 shard hosts, expected one per shard (3)"));
}

TEST(ShardRoutingTest, CopyOnItsOwnPrimaryIsRefused) {
  ClusterView view = ViewWithServers({0, 1});
  AddHost(&view, 0, 0, 0);
  AddHost(&view, 1, 1, 0);
  EXPECT_THAT(ShardRoutes(view, 2).status().message(), HasSubstr("other than its primary 0"));
}

}  // namespace
}  // namespace pstrain::worker
