// CheckpointCadence: which cuts are bases and which deltas (server/checkpoint_cadence.h).
#include "server/checkpoint_cadence.h"

#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

TEST(CheckpointCadenceTest, ABaseEveryFullEveryCutsAndDeltasOnThePreviousCutBetween) {
  CheckpointCadence cadence(3);
  EXPECT_TRUE(cadence.deltas_on());
  EXPECT_EQ(cadence.Plan(10, true), -1);  // nothing before: a base
  cadence.Written(10);
  EXPECT_EQ(cadence.Plan(20, true), 10);
  cadence.Written(20);
  EXPECT_EQ(cadence.Plan(30, true), 20);
  cadence.Written(30);
  EXPECT_EQ(cadence.Plan(40, true), -1);  // the third cut after the base
  cadence.Written(40);
  EXPECT_EQ(cadence.Plan(50, true), 40);
}

TEST(CheckpointCadenceTest, EveryCutIsWholeWithoutDeltas) {
  for (int full_every : {0, 1}) {
    CheckpointCadence cadence(full_every);
    EXPECT_FALSE(cadence.deltas_on());
    for (int64_t step = 1; step < 5; ++step) {
      EXPECT_EQ(cadence.Plan(step, true), -1);
      cadence.Written(step);
    }
  }
}

TEST(CheckpointCadenceTest, AnUnwrittenCutOrOneTheStoragesCannotFollowIsFollowedByABase) {
  CheckpointCadence cadence(10);
  EXPECT_EQ(cadence.Plan(1, true), -1);
  cadence.Written(1);
  EXPECT_EQ(cadence.Plan(2, true), 1);
  // Cut 2's file was not written (failed, skipped, or still being written): 3 cannot follow it.
  EXPECT_EQ(cadence.Plan(3, true), -1);
  cadence.Written(3);
  // The storages cannot write a delta (a table lost tombstones): a base.
  EXPECT_EQ(cadence.Plan(4, false), -1);
  cadence.Written(4);
  EXPECT_EQ(cadence.Plan(5, true), 4);
}

TEST(CheckpointCadenceTest, AfterARestoreTheNextCutIsABase) {
  CheckpointCadence cadence(10);
  EXPECT_EQ(cadence.Plan(1, true), -1);
  cadence.Written(1);
  cadence.Restored();
  EXPECT_EQ(cadence.Plan(2, true), -1);
  cadence.Written(2);
  EXPECT_EQ(cadence.Plan(3, true), 2);
}

}  // namespace
}  // namespace pstrain::server
