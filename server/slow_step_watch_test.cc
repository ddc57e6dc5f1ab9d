#include "server/slow_step_watch.h"

#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

using ::testing::ElementsAre;

ParameterStore::PendingStep Pending(int64_t step, absl::Duration waited, std::vector<int> missing,
                                    absl::Duration typical = absl::Milliseconds(5)) {
  ParameterStore::PendingStep p;
  p.step = step;
  p.waited = waited;
  p.missing = std::move(missing);
  p.typical = typical;
  return p;
}

TEST(SlowStepWatchTest, NothingPendingOrShortWaitIsNotSlow) {
  SlowStepWatch watch(0);
  EXPECT_FALSE(watch.Check(std::nullopt).has_value());
  EXPECT_FALSE(watch.Check(Pending(3, absl::Milliseconds(900), {1})).has_value());  // below the floor
  EXPECT_FALSE(watch.Check(Pending(3, absl::Seconds(5), {})).has_value());          // nobody missing
}

TEST(SlowStepWatchTest, LimitIsTenTimesTheTypicalWaitAboveTheFloor) {
  SlowStepWatch watch(1);
  EXPECT_FALSE(watch.Check(Pending(7, absl::Seconds(2), {2}, absl::Milliseconds(300))).has_value());
  std::optional<SlowStepReport> report = watch.Check(Pending(7, absl::Seconds(4), {2}, absl::Milliseconds(300)));
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->server_rank(), 1);
  EXPECT_EQ(report->step(), 7);
  EXPECT_EQ(report->waited_ms(), 4000);
  EXPECT_EQ(report->typical_ms(), 300);
  EXPECT_THAT(report->waiting_for(), ElementsAre(2));
}

TEST(SlowStepWatchTest, ReportsEachStepAndMissingSetOnce) {
  SlowStepWatch watch(0);
  ASSERT_TRUE(watch.Check(Pending(5, absl::Seconds(2), {1, 3})).has_value());
  EXPECT_FALSE(watch.Check(Pending(5, absl::Seconds(3), {1, 3})).has_value());  // same wait, still
  std::optional<SlowStepReport> fewer = watch.Check(Pending(5, absl::Seconds(4), {3}));
  ASSERT_TRUE(fewer.has_value());  // worker 1 arrived; 3 still holds the step up
  EXPECT_THAT(fewer->waiting_for(), ElementsAre(3));
  EXPECT_TRUE(watch.Check(Pending(6, absl::Seconds(2), {3})).has_value());  // the next step
}

}  // namespace
}  // namespace pstrain::server
