#include "scheduler/status_json.h"

#include <string>

#include "gtest/gtest.h"
#include "scheduler/json_test_util.h"

namespace pstrain {
namespace scheduler {
namespace {

google::protobuf::Value Parse(const std::string& text) {
  google::protobuf::Value value;
  std::string error;
  EXPECT_TRUE(ParseJson(text, &value, &error)) << error << "\n" << text;
  return value;
}

DashboardStatus FullStatus() {
  DashboardStatus s;
  s.state = "RUNNING";
  s.mode = "async";
  s.now_seconds = 12.5;
  s.epoch = 1;
  s.epochs = 3;
  s.step = 40;
  s.total_steps = 120;
  s.samples_per_second = 1000;
  s.eta_seconds = 20;
  s.membership_epoch = 4;
  EpochStatus e;
  e.epoch = 0;
  e.train_loss = 0.5;
  e.test_auc = 0.75;
  e.samples = 100;
  e.end_seconds = 6;
  s.epochs_done.push_back(e);
  s.members.push_back(MemberStatus{"server", 0, "h:1", "h:9101", "live", 0.25, 1});
  s.members.push_back(MemberStatus{"worker", 1, "a \"quoted\"\\name\n", "", "dead", kUnknown, 2});
  WorkerStatus w;
  w.rank = 1;
  w.bytes_sent = 5;
  s.workers.push_back(w);
  s.servers.push_back(ServerStatus{0, 10, 20, 3, 1});
  s.membership_events.push_back(MembershipEventStatus{3.5, "worker", 1, "died"});
  s.slow_steps.push_back(SlowStepStatus{4, 0, 17, 2.5, {1, 2}});
  StuckBarrierStatus b;
  b.name = "epoch 1 start";
  b.waiting_seconds = 11;
  b.missing.push_back(MissingParticipant{"worker", 2, "h:5", 7});
  s.stuck_barriers.push_back(b);
  s.table_history.push_back(
      TableSizeSeries{1, {TableSizePoint{2.5, 300, 40000, 12}, TableSizePoint{3.5, 310, 41000, 20}}});
  return s;
}

TEST(StatusJsonTest, HasTheDocumentedShape) {
  const google::protobuf::Value v = Parse(StatusJson(FullStatus()));
  for (const char* name : {"state",
                           "failure",
                           "mode",
                           "now_seconds",
                           "epoch",
                           "epochs",
                           "step",
                           "total_steps",
                           "samples_per_second",
                           "eta_seconds",
                           "recent_loss",
                           "membership_epoch",
                           "epochs_done",
                           "members",
                           "workers",
                           "servers",
                           "membership_events",
                           "slow_steps",
                           "stuck_barriers",
                           "table_history"}) {
    EXPECT_NE(Member(v, name).kind_case(), google::protobuf::Value::KIND_NOT_SET) << name;
  }
  EXPECT_EQ(Member(v, "state").string_value(), "RUNNING");
  EXPECT_EQ(Member(v, "total_steps").number_value(), 120);
  const auto& epoch = Member(v, "epochs_done").list_value().values(0);
  EXPECT_EQ(Member(epoch, "test_auc").number_value(), 0.75);
  EXPECT_EQ(Member(epoch, "end_seconds").number_value(), 6);
  const auto& server = Member(v, "servers").list_value().values(0);
  EXPECT_EQ(Member(server, "bytes_sent").number_value(), 20);
  EXPECT_EQ(Member(server, "refused").number_value(), 1);
  const auto& slow = Member(v, "slow_steps").list_value().values(0);
  EXPECT_EQ(Member(slow, "waiting_for").list_value().values_size(), 2);
  const auto& stuck = Member(v, "stuck_barriers").list_value().values(0);
  EXPECT_EQ(Member(stuck, "name").string_value(), "epoch 1 start");
  const auto& missing = Member(stuck, "missing").list_value().values(0);
  EXPECT_EQ(Member(missing, "address").string_value(), "h:5");
  EXPECT_EQ(Member(missing, "last_heartbeat_seconds_ago").number_value(), 7);
  EXPECT_EQ(Member(Member(v, "membership_events").list_value().values(0), "kind").string_value(), "died");
  const auto& tables = Member(v, "table_history").list_value().values(0);
  EXPECT_EQ(Member(tables, "server").number_value(), 1);
  const auto& point = Member(tables, "points").list_value().values(1).list_value();
  ASSERT_EQ(point.values_size(), 4);
  EXPECT_EQ(point.values(0).number_value(), 3.5);  // seconds, rows, bytes, evicted
  EXPECT_EQ(point.values(1).number_value(), 310);
  EXPECT_EQ(point.values(2).number_value(), 41000);
  EXPECT_EQ(point.values(3).number_value(), 20);
}

TEST(StatusJsonTest, UnknownNumbersAreNull) {
  const google::protobuf::Value v = Parse(StatusJson(FullStatus()));
  EXPECT_EQ(Member(v, "recent_loss").kind_case(), google::protobuf::Value::kNullValue);
  const auto& epoch = Member(v, "epochs_done").list_value().values(0);
  EXPECT_EQ(Member(epoch, "test_loss").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(Member(epoch, "test_accuracy").kind_case(), google::protobuf::Value::kNullValue);
  const auto& worker = Member(v, "workers").list_value().values(0);
  EXPECT_EQ(Member(worker, "staleness_mean").kind_case(), google::protobuf::Value::kNullValue);
  const auto& dead = Member(v, "members").list_value().values(1);
  EXPECT_EQ(Member(dead, "last_heartbeat_seconds_ago").kind_case(), google::protobuf::Value::kNullValue);
}

TEST(StatusJsonTest, EscapesStrings) {
  const google::protobuf::Value v = Parse(StatusJson(FullStatus()));
  EXPECT_EQ(Member(Member(v, "members").list_value().values(1), "address").string_value(), "a \"quoted\"\\name\n");
  EXPECT_EQ(Member(Parse(ErrorJson("bad \"x\"")), "error").string_value(), "bad \"x\"");
}

TEST(StatusJsonTest, EmptyStatusIsValid) {
  const google::protobuf::Value v = Parse(StatusJson(DashboardStatus()));
  EXPECT_EQ(Member(v, "members").list_value().values_size(), 0);
}

TEST(StatusJsonTest, TimelineListsPointsAndNext) {
  TimelinePoint p;
  p.seq = 7;
  p.worker = 2;
  p.compute = 0.125;
  const google::protobuf::Value v = Parse(TimelineJson({p}, 8));
  EXPECT_EQ(Member(v, "next").number_value(), 8);
  const auto& point = Member(v, "points").list_value().values(0);
  EXPECT_EQ(Member(point, "seq").number_value(), 7);
  EXPECT_EQ(Member(point, "compute").number_value(), 0.125);
  EXPECT_EQ(Member(point, "push").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(Member(Parse(TimelineJson({}, 0)), "points").list_value().values_size(), 0);
}

TEST(StatusJsonTest, TargetsUsePrometheusServiceDiscoveryFormat) {
  const google::protobuf::Value v =
      Parse(TargetsJson({MetricsTarget{"h:9101", {{"role", "server"}, {"rank", "0"}}}, MetricsTarget{"h:9102", {}}}));
  ASSERT_EQ(v.list_value().values_size(), 2);
  const auto& first = v.list_value().values(0);
  EXPECT_EQ(Member(first, "targets").list_value().values(0).string_value(), "h:9101");
  EXPECT_EQ(Member(Member(first, "labels"), "role").string_value(), "server");
  EXPECT_EQ(Member(Member(first, "labels"), "rank").string_value(), "0");
  EXPECT_EQ(Parse(TargetsJson({})).list_value().values_size(), 0);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
