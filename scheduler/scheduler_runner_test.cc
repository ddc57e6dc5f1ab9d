// The whole scheduler process logic (SchedulerRunner) against a tiny IDX data set, with the test
// playing one server and one worker over real gRPC.
#include "scheduler/scheduler_runner.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "transport/session_metadata.h"
#include "gtest/gtest.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/json_test_util.h"

namespace pstrain {
namespace scheduler {
namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>((v >> shift) & 0xff));
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes plain (not gzipped) IDX files with `n` 4x4 images per split into a fresh folder.
std::string MakeDataDir(const std::string& name, uint32_t train_n, uint32_t test_n) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name, "-", getpid());
  mkdir(dir.c_str(), 0755);
  for (auto [prefix, n] : {std::pair<std::string, uint32_t>{"train", train_n}, {"t10k", test_n}}) {
    std::string images, labels;
    PutU32(&images, 0x803);
    PutU32(&images, n);
    PutU32(&images, 4);
    PutU32(&images, 4);
    images.append(n * 16, '\x40');
    PutU32(&labels, 0x801);
    PutU32(&labels, n);
    for (uint32_t i = 0; i < n; ++i) labels.push_back(static_cast<char>(i % 10));
    WriteFile(absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte"), images);
    WriteFile(absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte"), labels);
  }
  return dir;
}

JobSpec Job(const std::string& data_dir) {
  JobSpec job;
  job.set_num_servers(1);
  job.set_num_workers(1);
  job.set_epochs(1);
  job.set_batch_size(8);
  job.add_hidden_sizes(3);
  job.mutable_data()->set_data_dir(data_dir);
  return job;
}

class Roles {
 public:
  explicit Roles(int port)
      : stub_(pstrain::Scheduler::NewStub(
            grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()))) {}

  // One call; it carries the session credential of the role and rank the request acts as, as the
  // registrations so far answered it.
  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if constexpr (std::is_same_v<Req, HeartbeatRequest>) AttachSession(&ctx, credentials_[{req.role(), req.rank()}]);
    if constexpr (std::is_same_v<Req, ProgressReport> || std::is_same_v<Req, LeaseRequest>) {
      AttachSession(&ctx, credentials_[{WORKER, req.worker_rank()}]);
    }
    grpc::Status status = (stub_.get()->*method)(&ctx, req, resp);
    if constexpr (std::is_same_v<Resp, RegisterResponse>) {
      credentials_[{req.role(), resp->rank()}] = resp->session_credential();
    }
    return status;
  }

  pstrain::Scheduler::Stub* stub() { return stub_.get(); }

 private:
  std::unique_ptr<pstrain::Scheduler::Stub> stub_;
  std::map<std::pair<Role, int>, std::string> credentials_;
};

// Waits (bounded) until the runner listens; 0 if it never does.
int AwaitPort(const SchedulerRunner& runner) {
  for (int i = 0; i < 600 && runner.port() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return runner.port();
}

SchedulerRunner::Options FastOptions(const std::string& dir) {
  SchedulerRunner::Options options;
  options.port_file = dir + "/port";
  options.summary_json = dir + "/summary.json";
  options.heartbeat_interval = absl::Milliseconds(100);
  options.dead_after = absl::Milliseconds(2000);
  options.startup_timeout = absl::Seconds(60);
  return options;
}

TEST(SchedulerRunnerTest, RunsAJobToTheEndAndWritesTheSummary) {
  const std::string dir = MakeDataDir("runner-ok", 20, 10);
  auto runner = SchedulerRunner::Create(Job(dir), FastOptions(dir));
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::future<absl::Status> result = std::async(std::launch::async, [&] { return (*runner)->Run(); });
  const int port = AwaitPort(**runner);
  ASSERT_GT(port, 0);
  EXPECT_EQ(ReadFile(dir + "/port"), absl::StrCat(port, "\n"));

  Roles roles(port);
  RegisterRequest reg;
  RegisterResponse reg_resp;
  reg.set_role(SERVER);
  reg.set_address("127.0.0.1:1");
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::Register, reg, &reg_resp).ok());
  EXPECT_EQ(reg_resp.rank(), 0);
  EXPECT_EQ(reg_resp.heartbeat_ms(), 100);
  EXPECT_EQ(reg_resp.job().data().data_dir(), dir);
  reg.set_role(WORKER);
  reg.set_address("");
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::Register, reg, &reg_resp).ok());

  GetClusterViewRequest view_req;
  view_req.set_wait_until_running(true);
  ClusterView view;
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::GetClusterView, view_req, &view).ok());
  EXPECT_EQ(view.state(), RUNNING);
  EXPECT_EQ(view.train_samples(), 20);
  EXPECT_EQ(view.test_samples(), 10);
  EXPECT_EQ(view.total_steps(), 3);  // ceil(20 / 8) global batches, one epoch.
  // 16-3-10: fc1.weight {16, 3}, fc1.bias, fc2.weight {3, 10}, fc2.bias.
  ASSERT_EQ(view.shard_map().tensors_size(), 4);
  EXPECT_EQ(view.shard_map().tensors(0).name(), "fc1.weight");
  EXPECT_EQ(view.shard_map().tensors(0).num_elements(), 48);
  EXPECT_EQ(view.shard_map().tensors(2).init(), GLOROT_UNIFORM);
  EXPECT_EQ(view.shard_map().tensors(3).flat_offset(), 48 + 3 + 30);

  ProgressReport report;
  report.set_worker_rank(0);
  report.set_step(3);
  report.mutable_train()->set_loss_sum(40.0);
  report.mutable_train()->set_samples(20);
  report.mutable_train()->set_steps(3);
  ProgressResponse progress_resp;
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::ReportProgress, report, &progress_resp).ok());
  // The test set of 10 comes in evaluation leases of ceil(10 / 4) = 3 samples: 3, 3, 3, 1, each
  // reported with all but one right (one of one for the last): 7 of 10.
  LeaseRequest lease_req;
  lease_req.set_worker_rank(0);
  lease_req.set_eval(true);
  int64_t evaluated = 0;
  for (int i = 0; i < 10; ++i) {
    LeaseResponse lease;
    ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::LeaseWork, lease_req, &lease).ok());
    ASSERT_FALSE(lease.wait());
    if (lease.epoch_done()) break;
    ProgressReport eval;
    eval.set_worker_rank(0);
    EvalStats* e = eval.add_evals();
    e->set_lease_id(lease.lease_id());
    e->set_samples(lease.end() - lease.begin());
    e->set_correct(std::max<int64_t>(1, e->samples() - 1));
    e->set_loss_sum(0.5 * static_cast<double>(e->samples()));
    evaluated += e->samples();
    ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::ReportProgress, eval, &progress_resp).ok());
  }
  EXPECT_EQ(evaluated, 10);
  ProgressReport done;
  done.set_worker_rank(0);
  done.set_done(true);
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::ReportProgress, done, &progress_resp).ok());

  // The server hears FINISHED in a heartbeat, which also ends the runner's grace period.
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  HeartbeatResponse hb_resp;
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::Heartbeat, hb, &hb_resp).ok());
  EXPECT_EQ(hb_resp.state(), FINISHED);

  absl::Status status = result.get();
  EXPECT_TRUE(status.ok()) << status;
  const std::string summary = ReadFile(dir + "/summary.json");
  EXPECT_NE(summary.find("\"state\": \"FINISHED\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"final_test_accuracy\": 0.7,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"final_test_loss\": 0.5,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"train_loss\": 2,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"membership_events\": [],"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"live_workers\": [0],"), std::string::npos) << summary;
}

// Waits (bounded) until the runner's dashboard listens; 0 if it never does.
int AwaitHttpPort(const SchedulerRunner& runner) {
  for (int i = 0; i < 600 && runner.http_port() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return runner.http_port();
}

// GETs `path` from the dashboard and parses the JSON answer, checking its headers.
google::protobuf::Value GetJson(httplib::Client* client, const std::string& path, int expected_status = 200) {
  google::protobuf::Value value;
  auto response = client->Get(path.c_str());
  EXPECT_TRUE(response) << path;
  if (!response) return value;
  EXPECT_EQ(response->status, expected_status) << path << ": " << response->body;
  EXPECT_EQ(response->get_header_value("Content-Type"), "application/json") << path;
  EXPECT_EQ(response->get_header_value("Cache-Control"), "no-store") << path;
  std::string error;
  EXPECT_TRUE(ParseJson(response->body, &value, &error)) << path << ": " << error << "\n" << response->body;
  return value;
}

TEST(SchedulerRunnerTest, ServesTheDashboardApiAndMetrics) {
  const std::string dir = MakeDataDir("runner-http", 20, 10);
  SchedulerRunner::Options options = FastOptions(dir);
  options.http_port = -1;
  options.http_port_file = dir + "/http_port";
  auto runner = SchedulerRunner::Create(Job(dir), options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::future<absl::Status> result = std::async(std::launch::async, [&] { return (*runner)->Run(); });
  const int port = AwaitPort(**runner);
  ASSERT_GT(port, 0);
  const int http_port = AwaitHttpPort(**runner);
  ASSERT_GT(http_port, 0);
  EXPECT_EQ(ReadFile(dir + "/http_port"), absl::StrCat(http_port, "\n"));

  Roles roles(port);
  RegisterRequest reg;
  RegisterResponse reg_resp;
  reg.set_role(SERVER);
  reg.set_address("127.0.0.1:1");
  reg.set_metrics_address("127.0.0.1:9101");
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::Register, reg, &reg_resp).ok());
  reg.set_role(WORKER);
  reg.set_address("");
  reg.set_metrics_address("127.0.0.1:9102");
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::Register, reg, &reg_resp).ok());
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  hb.mutable_traffic()->set_bytes_received(1000);
  hb.mutable_traffic()->set_requests(7);
  HeartbeatResponse hb_resp;
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::Heartbeat, hb, &hb_resp).ok());
  ProgressReport report;
  report.set_worker_rank(0);
  report.set_step(2);
  report.mutable_train()->set_loss_sum(16.0);
  report.mutable_train()->set_samples(8);
  report.mutable_train()->set_steps(2);
  report.mutable_step_times()->set_steps(2);
  report.mutable_step_times()->set_compute_seconds(0.5);
  report.mutable_traffic()->set_bytes_sent(300);
  ProgressResponse progress_resp;
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::ReportProgress, report, &progress_resp).ok());

  httplib::Client client("127.0.0.1", http_port);
  const google::protobuf::Value status = GetJson(&client, "/api/status");
  EXPECT_EQ(Member(status, "state").string_value(), "RUNNING");
  EXPECT_EQ(Member(status, "mode").string_value(), "sync");
  EXPECT_EQ(Member(status, "step").number_value(), 2);
  EXPECT_EQ(Member(status, "total_steps").number_value(), 3);
  const auto& members = Member(status, "members").list_value().values();
  ASSERT_EQ(members.size(), 3);  // The scheduler, the server and the worker.
  EXPECT_EQ(Member(members[0], "role").string_value(), "scheduler");
  EXPECT_EQ(Member(members[0], "address").string_value(), absl::StrCat("127.0.0.1:", port));
  EXPECT_EQ(Member(members[1], "role").string_value(), "server");
  EXPECT_EQ(Member(members[1], "metrics_address").string_value(), "127.0.0.1:9101");
  EXPECT_EQ(Member(members[1], "state").string_value(), "live");
  EXPECT_GE(Member(members[1], "last_heartbeat_seconds_ago").number_value(), 0);
  EXPECT_EQ(Member(members[2], "role").string_value(), "worker");
  EXPECT_EQ(Member(members[2], "metrics_address").string_value(), "127.0.0.1:9102");
  // The worker never heartbeated: its age is unknown (null).
  EXPECT_EQ(Member(members[2], "last_heartbeat_seconds_ago").kind_case(), google::protobuf::Value::kNullValue);
  const auto& workers = Member(status, "workers").list_value().values();
  ASSERT_EQ(workers.size(), 1);
  EXPECT_EQ(Member(workers[0], "samples").number_value(), 8);
  EXPECT_EQ(Member(workers[0], "bytes_sent").number_value(), 300);
  const auto& servers = Member(status, "servers").list_value().values();
  ASSERT_EQ(servers.size(), 1);
  EXPECT_EQ(Member(servers[0], "bytes_received").number_value(), 1000);
  EXPECT_EQ(Member(servers[0], "requests").number_value(), 7);
  EXPECT_EQ(Member(status, "stuck_barriers").list_value().values_size(), 0);

  const google::protobuf::Value timeline = GetJson(&client, "/api/timeline?since=0");
  EXPECT_EQ(Member(timeline, "next").number_value(), 1);
  const auto& points = Member(timeline, "points").list_value().values();
  ASSERT_EQ(points.size(), 1);
  EXPECT_EQ(Member(points[0], "worker").number_value(), 0);
  EXPECT_EQ(Member(points[0], "loss").number_value(), 2);
  EXPECT_EQ(Member(points[0], "compute").number_value(), 0.25);
  EXPECT_EQ(Member(GetJson(&client, "/api/timeline?since=1"), "points").list_value().values_size(), 0);
  const google::protobuf::Value bad = GetJson(&client, "/api/timeline?since=x", 400);
  EXPECT_NE(Member(bad, "error").string_value().find("since"), std::string::npos);
  GetJson(&client, "/api/nothing", 404);

  const google::protobuf::Value targets = GetJson(&client, "/api/targets");
  const auto& list = targets.list_value().values();
  ASSERT_EQ(list.size(), 3);
  // The scheduler's own metrics are at its dashboard's /metrics.
  EXPECT_EQ(Member(list[0], "targets").list_value().values(0).string_value(), absl::StrCat("127.0.0.1:", http_port));
  EXPECT_EQ(Member(Member(list[0], "labels"), "role").string_value(), "scheduler");
  EXPECT_EQ(Member(list[1], "targets").list_value().values(0).string_value(), "127.0.0.1:9101");
  EXPECT_EQ(Member(Member(list[1], "labels"), "role").string_value(), "server");
  EXPECT_EQ(Member(Member(list[1], "labels"), "rank").string_value(), "0");
  EXPECT_EQ(Member(Member(list[2], "labels"), "role").string_value(), "worker");

  auto scrape = client.Get("/metrics");
  ASSERT_TRUE(scrape);
  EXPECT_EQ(scrape->status, 200);
  EXPECT_NE(scrape->body.find("pstrain_scheduler_live_members{member_role=\"worker\"} 1\n"), std::string::npos)
      << scrape->body;
  EXPECT_NE(scrape->body.find("pstrain_scheduler_step 2\n"), std::string::npos) << scrape->body;

  auto index = client.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_NE(index->get_header_value("Content-Type").find("text/html"), std::string::npos);

  (*runner)->Stop();
  EXPECT_EQ(result.get().code(), absl::StatusCode::kCancelled);
}

TEST(SchedulerRunnerTest, MissingDataFailsAtStartWithTheReadersMessage) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/no-such-data-", getpid());
  auto runner = SchedulerRunner::Create(Job(dir), SchedulerRunner::Options());
  ASSERT_TRUE(runner.ok()) << runner.status();
  absl::Status status = (*runner)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("train-images-idx3-ubyte"), absl::string_view::npos) << status;
  EXPECT_EQ((*runner)->port(), 0);
}

TEST(SchedulerRunnerTest, SilentRoleFailsTheJob) {
  const std::string dir = MakeDataDir("runner-dead", 20, 10);
  SchedulerRunner::Options options = FastOptions(dir);
  options.dead_after = absl::Milliseconds(300);
  auto runner = SchedulerRunner::Create(Job(dir), options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::future<absl::Status> result = std::async(std::launch::async, [&] { return (*runner)->Run(); });
  const int port = AwaitPort(**runner);
  ASSERT_GT(port, 0);
  Roles roles(port);
  RegisterRequest reg;
  RegisterResponse reg_resp;
  reg.set_role(SERVER);
  reg.set_address("127.0.0.1:1");
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::Register, reg, &reg_resp).ok());
  HeartbeatRequest hb;
  hb.set_role(SERVER);
  HeartbeatResponse hb_resp;
  ASSERT_TRUE(roles.Call(&pstrain::Scheduler::Stub::Heartbeat, hb, &hb_resp).ok());
  EXPECT_EQ(hb_resp.state(), WAITING_FOR_ROLES);

  absl::Status status = result.get();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("server 0 at 127.0.0.1:1 sent no heartbeat for"), absl::string_view::npos) << status;
  const std::string summary = ReadFile(dir + "/summary.json");
  EXPECT_NE(summary.find("\"state\": \"FAILED\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("sent no heartbeat"), std::string::npos) << summary;
}

TEST(SchedulerRunnerTest, StopEndsTheRunAsCancelled) {
  const std::string dir = MakeDataDir("runner-stop", 20, 10);
  auto runner = SchedulerRunner::Create(Job(dir), FastOptions(dir));
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::future<absl::Status> result = std::async(std::launch::async, [&] { return (*runner)->Run(); });
  ASSERT_GT(AwaitPort(**runner), 0);
  (*runner)->Stop();
  absl::Status status = result.get();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

TEST(SchedulerRunnerTest, RejectsBadOptions) {
  SchedulerRunner::Options options;
  options.dead_after = absl::Milliseconds(100);
  options.heartbeat_interval = absl::Milliseconds(500);
  EXPECT_EQ(SchedulerRunner::Create(Job("x"), options).status().code(), absl::StatusCode::kInvalidArgument);
  options = SchedulerRunner::Options();
  options.port = 70000;
  EXPECT_EQ(SchedulerRunner::Create(Job("x"), options).status().code(), absl::StatusCode::kInvalidArgument);
  options = SchedulerRunner::Options();
  options.http_port = -2;
  EXPECT_EQ(SchedulerRunner::Create(Job("x"), options).status().code(), absl::StatusCode::kInvalidArgument);
  options = SchedulerRunner::Options();
  options.server_recovery_timeout = absl::ZeroDuration();
  EXPECT_EQ(SchedulerRunner::Create(Job("x"), options).status().code(), absl::StatusCode::kInvalidArgument);
  JobSpec bad = Job("x");
  bad.set_batch_size(-1);
  EXPECT_EQ(SchedulerRunner::Create(bad, SchedulerRunner::Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
