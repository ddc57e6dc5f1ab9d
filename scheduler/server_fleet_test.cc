#include "scheduler/server_fleet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/time.h"
#include "scheduler/member_limits.h"

namespace pstrain {
namespace scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

CheckpointReport Report(int rank, std::vector<int64_t> steps) {
  CheckpointReport report;
  report.set_server_rank(rank);
  for (int64_t step : steps) report.add_steps(step);
  return report;
}

TEST(ServerFleetTest, WithoutReplicasEveryShardIsItsOwnRank) {
  ServerFleet fleet(3, /*replicas=*/false);
  EXPECT_FALSE(fleet.replicated());
  EXPECT_THAT(fleet.shard_hosts(), IsEmpty());
  EXPECT_EQ(fleet.PrimaryOf(2), 2);
  EXPECT_THAT(fleet.OnlyCopiesOn(1), IsEmpty());
  EXPECT_EQ(fleet.HostsLine(), "");
}

TEST(ServerFleetTest, APromotedCopyServesTheShardAndTheSecondDeathLosesIt) {
  ServerFleet fleet(3, /*replicas=*/true);
  EXPECT_EQ(fleet.HostsLine(),
            "shard 0 on server 0, copy on 1; shard 1 on server 1, copy on 2; shard 2 on server 2, copy on 0");
  EXPECT_THAT(fleet.OnlyCopiesOn(1), IsEmpty());
  fleet.Promote(1);
  // Shard 1 moved to its copy on 2; shard 0 lost its copy on 1.
  EXPECT_EQ(fleet.PrimaryOf(1), 2);
  EXPECT_EQ(fleet.HostsLine(),
            "shard 0 on server 0, no copy; shard 1 on server 2, no copy; shard 2 on server 2, copy on 0");
  EXPECT_THAT(fleet.OnlyCopiesOn(2), ElementsAre(1));
  EXPECT_THAT(fleet.OnlyCopiesOn(0), ElementsAre(0));
}

TEST(ServerFleetTest, ANewServerCountPlacesEveryShardAndItsCopyAfresh) {
  ServerFleet fleet(2, /*replicas=*/true);
  EXPECT_FALSE(fleet.Degraded());
  fleet.Resize(3);
  EXPECT_FALSE(fleet.Degraded());
  EXPECT_EQ(fleet.HostsLine(),
            "shard 0 on server 0, copy on 1; shard 1 on server 1, copy on 2; shard 2 on server 2, copy on 0");
  fleet.Resize(2);
  EXPECT_EQ(fleet.HostsLine(), "shard 0 on server 0, copy on 1; shard 1 on server 1, copy on 0");
  fleet.Promote(0);
  EXPECT_TRUE(fleet.Degraded());
  EXPECT_FALSE(ServerFleet(3, /*replicas=*/false).Degraded());
}

TEST(ServerFleetTest, ChecksCheckpointReports) {
  EXPECT_TRUE(ServerFleet::CheckReport(Report(0, {10, 20})).ok());
  EXPECT_TRUE(ServerFleet::CheckReport(Report(0, {})).ok());
  absl::Status descending = ServerFleet::CheckReport(Report(1, {20, 10}));
  EXPECT_TRUE(absl::IsInvalidArgument(descending));
  EXPECT_THAT(descending.message(), HasSubstr("step 10 at index 1 after 20"));
  EXPECT_TRUE(absl::IsInvalidArgument(ServerFleet::CheckReport(Report(1, {-1}))));
  std::vector<int64_t> many(kMaxCheckpointSteps + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i);
  EXPECT_THAT(ServerFleet::CheckReport(Report(0, many)).message(), HasSubstr("the limit is"));
}

TEST(ServerFleetTest, AVacancyDropsTheRestoreStepUntilTheCallerSetsItAgain) {
  ServerFleet fleet(2, /*replicas=*/false);
  fleet.SetCheckpoints(Report(0, {10, 20, 30}));
  fleet.SetCheckpoints(Report(1, {10, 20}));
  EXPECT_EQ(fleet.NewestCheckpoint(0), 30);
  EXPECT_EQ(fleet.NewestCommonStep(), 20);
  fleet.SetRestoreStep(20, 3);
  EXPECT_EQ(fleet.NewestCheckpoint(0), 20);  // 30 is of the abandoned run
  fleet.Vacate(1, absl::FromUnixSeconds(100), /*keep_restore_step=*/false);
  EXPECT_FALSE(fleet.restore_step().has_value());
  EXPECT_EQ(fleet.vacancies().size(), 1u);
  // The dead server's list stays for its replacement.
  EXPECT_EQ(fleet.NewestCheckpoint(1), 20);
  fleet.Fill(1);
  EXPECT_TRUE(fleet.vacancies().empty());
  fleet.SetRestoreStep(fleet.NewestCommonStep(), 7);
  ClusterView view;
  fleet.AddToView(&view);
  EXPECT_EQ(view.restore_step(), 20);
  EXPECT_EQ(view.restore_epoch(), 7);
}

TEST(ServerFleetTest, AJobResumedOnAnotherCountGoesBackNoFurtherThanItsCutAndNamesItsCount) {
  // Resumed on 3 servers from the cut of step 300 taken on 2: ranks 0 and 1 hold that run's files,
  // rank 2 none yet.
  ServerFleet fleet(3, /*replicas=*/false);
  fleet.SetResumeCut(300, 2);
  fleet.SetCheckpoints(Report(0, {275, 300}));
  fleet.SetCheckpoints(Report(1, {275, 300}));
  EXPECT_EQ(fleet.NewestCommonStep(), 0);
  EXPECT_EQ(fleet.RestorableStep(), 300);
  fleet.SetRestoreStep(fleet.RestorableStep(), 4);
  ClusterView view;
  fleet.AddToView(&view);
  EXPECT_EQ(view.restore_step(), 300);
  EXPECT_EQ(view.restore_servers(), 2);

  // Once the new count has a cut of its own, a recovery goes back to it, with no old count.
  for (int rank = 0; rank < 3; ++rank) fleet.SetCheckpoints(Report(rank, {300, 325}));
  fleet.SetCheckpoints(Report(2, {325}));
  EXPECT_EQ(fleet.RestorableStep(), 325);
  fleet.SetRestoreStep(fleet.RestorableStep(), 5);
  view.Clear();
  fleet.AddToView(&view);
  EXPECT_EQ(view.restore_step(), 325);
  EXPECT_EQ(view.restore_servers(), 0);

  // A job resumed on its own count names none.
  ServerFleet same(2, /*replicas=*/false);
  same.SetResumeCut(300, 2);
  same.SetRestoreStep(300, 1);
  view.Clear();
  same.AddToView(&view);
  EXPECT_EQ(view.restore_servers(), 0);
}

TEST(ServerFleetTest, ARanksFilesOfAnEarlierServerCountAreNeverACut) {
  // 2 servers until the cut of 125, then 1, then 2 again from the cut of 150: rank 1's files of
  // steps 100 and 125 are of the first layout, and rank 0 holds 125 as well.
  ServerFleet fleet(2, /*replicas=*/false);
  fleet.Resize(1);
  fleet.SetResumeCut(125, 2);
  fleet.Resize(2);
  fleet.SetResumeCut(150, 1);
  fleet.SetCheckpoints(Report(0, {125, 150}));
  fleet.SetCheckpoints(Report(1, {100, 125}));
  EXPECT_EQ(fleet.NewestCommonStep(), 0);
  EXPECT_EQ(fleet.RestorableStep(), 150);
  fleet.SetCheckpoints(Report(1, {100, 125, 175}));
  fleet.SetCheckpoints(Report(0, {150, 175}));
  EXPECT_EQ(fleet.NewestCommonStep(), 175);
}

TEST(ServerFleetTest, StepsAfterTheRestoreStepAreOfTheAbandonedRun) {
  // The cut of 50 is restored while server 0 has written 75 already; server 1 dies before it
  // restores, its last report still listing 75.
  ServerFleet fleet(2, /*replicas=*/false);
  fleet.SetCheckpoints(Report(0, {25, 50, 75}));
  fleet.SetCheckpoints(Report(1, {25, 50, 75}));
  fleet.SetRestoreStep(50, 7);
  EXPECT_THAT(fleet.checkpoints(0), ElementsAre(25, 50));
  EXPECT_THAT(fleet.checkpoints(1), ElementsAre(25, 50));
  // A report from a store still at epoch 6 (it has not restored) loses its step 75; one from a
  // store that serves epoch 7 keeps all.
  EXPECT_THAT(fleet.WithoutAbandonedSteps(Report(1, {25, 50, 75}), 6).steps(), ElementsAre(25, 50));
  EXPECT_THAT(fleet.WithoutAbandonedSteps(Report(1, {25, 50, 75}), 7).steps(), ElementsAre(25, 50, 75));
  EXPECT_THAT(fleet.WithoutAbandonedSteps(Report(1, {25, 50, 75}), 0).steps(), ElementsAre(25, 50, 75));
}

TEST(ServerFleetTest, RestoresWhatItSaved) {
  ServerFleet fleet(3, /*replicas=*/true);
  fleet.SetCheckpoints(Report(2, {4, 8}));
  fleet.Promote(0);
  fleet.Vacate(1, absl::FromUnixSeconds(42), /*keep_restore_step=*/false);
  fleet.SetRestoreStep(4, 9);
  SchedulerState state;
  fleet.Save(&state);

  ServerFleet restored(3, /*replicas=*/true);
  ASSERT_TRUE(restored.Restore(state).ok());
  SchedulerState again;
  restored.Save(&again);
  EXPECT_EQ(again.SerializeAsString(), state.SerializeAsString());
  EXPECT_EQ(restored.HostsLine(), fleet.HostsLine());
  EXPECT_EQ(restored.vacancies().at(1), absl::FromUnixSeconds(42));
}

TEST(ServerFleetTest, RefusesTheStateOfALargerJob) {
  ServerFleet fleet(3, /*replicas=*/false);
  fleet.SetCheckpoints(Report(0, {1}));
  SchedulerState state;
  fleet.Save(&state);
  ServerFleet smaller(2, /*replicas=*/false);
  absl::Status s = smaller.Restore(state);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("checkpoint lists of 3 servers, the job has 2"));
  EXPECT_EQ(smaller.NewestCheckpoint(0), 0);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
