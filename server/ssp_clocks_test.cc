// SspClocks on its own: the staleness gate, and how pushes, finished workers, new epochs, joiners
// and a replacement server's unknown clocks move it.
#include "server/ssp_clocks.h"

#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

TEST(SspClocksTest, APullAtClockCWaitsForEveryUnfinishedClockAtLeastCMinusK) {
  SspClocks clocks(/*staleness=*/1);
  clocks.SetLive({0, 1});
  EXPECT_TRUE(clocks.Ready(1));   // 0 >= 1 - 1
  EXPECT_FALSE(clocks.Ready(2));  // both at 0
  clocks.Pushed(0, 0, false);
  clocks.Pushed(0, 1, false);     // worker 0 at 2
  EXPECT_FALSE(clocks.Ready(2));  // worker 1 at 0 < 1
  clocks.Pushed(1, 0, false);
  EXPECT_TRUE(clocks.Ready(2));
  clocks.Pushed(1, 0, /*same_step=*/true);  // the same step again: no step done
  EXPECT_FALSE(clocks.Ready(3));
  clocks.Finish(1);  // a finished worker holds nobody back
  EXPECT_TRUE(clocks.Ready(3));
  clocks.NewEpoch();  // every clock 0, nobody finished
  EXPECT_TRUE(clocks.Ready(1));
  EXPECT_FALSE(clocks.Ready(2));
}

TEST(SspClocksTest, ThePushedStepSetsTheClockOfAReplacementServer) {
  SspClocks clocks(/*staleness=*/0);
  clocks.SetLive({0, 1});
  clocks.ForgetClocks();  // unknown clocks hold nobody back
  EXPECT_TRUE(clocks.Ready(7));
  clocks.Pushed(1, 4, false);  // worker 1's step 4: its clock is 5
  EXPECT_TRUE(clocks.Ready(5));
  EXPECT_FALSE(clocks.Ready(6));
}

TEST(SspClocksTest, AJoinerStartsAtTheSlowestClockOfTheLiveWorkersInTheEpoch) {
  SspClocks clocks(/*staleness=*/0);
  clocks.SetLive({0, 1, 2});
  for (int i = 0; i < 3; ++i) clocks.Pushed(0, i, false);  // worker 0 at 3
  clocks.Pushed(1, 0, false);                              // worker 1 at 1, leaves
  clocks.Finish(2);                                        // worker 2 finished: not counted
  clocks.SetLive({0, 2, 4});
  EXPECT_TRUE(clocks.Ready(3));  // worker 4 joined at 3, worker 1 is gone
  EXPECT_FALSE(clocks.Ready(4));
}

// A worker idle for a while (it finished: no lease for it, or a stream with no new records) holds
// nobody back; its next push brings it back in where the others are, and from then on it counts.
TEST(SspClocksTest, AFinishedWorkerThatPushesAgainIsBackInWhereTheOthersAre) {
  SspClocks clocks(/*staleness=*/1);
  clocks.SetLive({0, 1});
  clocks.Pushed(1, 0, false);
  clocks.Finish(1);                                                        // idle at clock 1
  for (int64_t step = 0; step < 5; ++step) clocks.Pushed(0, step, false);  // worker 0 at 5
  EXPECT_TRUE(clocks.Ready(6));                                            // worker 1 holds nobody back
  clocks.Pushed(1, 1, false);                                              // back: raised to 5, then its push: 6
  EXPECT_TRUE(clocks.Ready(6));                                            // both >= 5
  EXPECT_FALSE(clocks.Ready(7));                                           // worker 0 at 5 < 6
  clocks.Pushed(0, 5, false);
  clocks.Pushed(0, 6, false);  // worker 0 at 7
  EXPECT_TRUE(clocks.Ready(7));
  EXPECT_FALSE(clocks.Ready(8)) << "worker 1, at 6, counts again";
}

}  // namespace
}  // namespace pstrain::server
