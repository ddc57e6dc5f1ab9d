#include "scheduler/scheduler_metrics.h"

#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace scheduler {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(SchedulerMetricsTest, GaugesFollowTheStatus) {
  metrics::Registry registry;
  registry.SetConstantLabels({{"role", "scheduler"}});
  SchedulerMetrics m(&registry);
  DashboardStatus s;
  s.state = "RUNNING";
  s.membership_epoch = 5;
  s.epoch = 1;
  s.epochs = 2;
  s.step = 15;
  s.total_steps = 20;  // 10 per epoch: 15 is half of epoch 1.
  s.samples_per_second = 250;
  s.recent_loss = 0.5;
  s.training_leases_out = 3;
  s.barriers_waiting = 1;
  s.members.push_back(MemberStatus{"server", 0, "h:1", "", "live", 0, 0});
  s.members.push_back(MemberStatus{"worker", 0, "h:2", "", "live", 0, 0});
  s.members.push_back(MemberStatus{"worker", 1, "h:3", "", "dead", 0, 0});
  s.membership_events.push_back(MembershipEventStatus{1, "worker", 1, "died"});
  EpochStatus e;
  e.test_loss = 0.25;
  e.test_accuracy = 0.9;
  s.epochs_done.push_back(e);
  m.Update(s);
  const std::string text = registry.Render();
  EXPECT_TRUE(Has(text, "pstrain_scheduler_job_state{role=\"scheduler\",state=\"RUNNING\"} 1")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_job_state{role=\"scheduler\",state=\"FAILED\"} 0")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_membership_epoch{role=\"scheduler\"} 5")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_live_members{role=\"scheduler\",member_role=\"worker\"} 1")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_live_members{role=\"scheduler\",member_role=\"server\"} 1")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_membership_events_total{role=\"scheduler\",kind=\"died\"} 1")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_leases_outstanding{role=\"scheduler\",kind=\"training\"} 3")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_epoch_progress_ratio{role=\"scheduler\"} 0.5")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_train_loss{role=\"scheduler\"} 0.5")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_test_loss{role=\"scheduler\"} 0.25")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_test_accuracy{role=\"scheduler\"} 0.9")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_samples_per_second{role=\"scheduler\"} 250")) << text;
  EXPECT_TRUE(Has(text, "pstrain_scheduler_barriers_waiting{role=\"scheduler\"} 1")) << text;

  // The counter follows the events' count without going back.
  s.membership_events.push_back(MembershipEventStatus{2, "worker", 2, "died"});
  m.Update(s);
  EXPECT_TRUE(Has(registry.Render(), "pstrain_scheduler_membership_events_total{role=\"scheduler\",kind=\"died\"} 2"));
}

TEST(SchedulerMetricsTest, UnknownLossesAreAbsentNotNaN) {
  metrics::Registry registry;
  SchedulerMetrics m(&registry);
  m.Update(DashboardStatus());
  const std::string text = registry.Render();
  EXPECT_EQ(text.find("pstrain_scheduler_test_loss"), std::string::npos) << text;
  EXPECT_EQ(text.find("pstrain_scheduler_train_loss"), std::string::npos) << text;
  EXPECT_EQ(text.find("NaN"), std::string::npos) << text;
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
