#include "scheduler/timeline.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

TimelinePoint At(int worker) {
  TimelinePoint p;
  p.worker = worker;
  return p;
}

TEST(TimelineTest, SinceReturnsNewerPointsOldestFirst) {
  Timeline timeline;
  for (int i = 0; i < 5; ++i) timeline.Add(At(i));
  int64_t next = -1;
  std::vector<TimelinePoint> points = timeline.Since(2, 100, &next);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0].seq, 2);
  EXPECT_EQ(points[0].worker, 2);
  EXPECT_EQ(points[2].seq, 4);
  EXPECT_EQ(next, 5);
  EXPECT_TRUE(timeline.Since(5, 100, &next).empty());
  EXPECT_EQ(next, 5);
}

TEST(TimelineTest, AnswersAreCappedAndResumeWhereTheyStopped) {
  Timeline timeline;
  for (int i = 0; i < 10; ++i) timeline.Add(At(i));
  int64_t next = 0;
  std::vector<TimelinePoint> points = timeline.Since(0, 4, &next);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(next, 4);
  points = timeline.Since(next, 4, &next);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0].seq, 4);
  EXPECT_EQ(next, 8);
}

TEST(TimelineTest, KeepsOnlyTheNewestCapacityPoints) {
  Timeline timeline(3);
  for (int i = 0; i < 7; ++i) timeline.Add(At(i));
  EXPECT_EQ(timeline.size(), 3u);
  int64_t next = 0;
  std::vector<TimelinePoint> points = timeline.Since(0, 100, &next);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0].seq, 4);  // 0..3 were dropped.
  EXPECT_EQ(points[2].seq, 6);
  EXPECT_EQ(next, 7);
}

TEST(TimelineTest, ASinceAheadOfTheTimelineRestartsAtItsEnd) {
  Timeline timeline;
  timeline.Add(At(0));
  int64_t next = 0;
  EXPECT_TRUE(timeline.Since(1000, 100, &next).empty());
  EXPECT_EQ(next, 1);  // E.g. a client of a scheduler that restarted: it asks from 1 next.
  EXPECT_EQ(timeline.Since(-5, 100, &next).size(), 1u);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
