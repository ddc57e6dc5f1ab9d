// Gradient sanity (JobSpec.max_grad_norm_per_sample) against real processes: a member with its own
// valid worker session pushes a gradient of 1e18 everywhere. The server refuses it (a precise
// INVALID_ARGUMENT, nothing applied), counts it in its Prometheus metrics, and the honest job goes
// on to the accuracy it reaches without the attacker.
#include <httplib.h>

#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/barriers.h"
#include "transport/grpc_status.h"
#include "scheduler/client/scheduler_client.h"
#include "transport/session_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

// The metrics port a role printed ("metrics at http://HOST:PORT/metrics"); 0 until it has.
int MetricsPort(const Child& role) {
  const std::string log = role.Output();
  const size_t at = log.find("metrics at http://");
  if (at == std::string::npos) return 0;
  const size_t end = log.find("/metrics", at + 18);
  const size_t colon = log.rfind(':', end);
  int port = 0;
  if (end == std::string::npos || colon == std::string::npos || colon < at ||
      !absl::SimpleAtoi(log.substr(colon + 1, end - colon - 1), &port)) {
    return 0;
  }
  return port;
}

// The value of the series `name` whose labels contain `labels`; -1 when there is none.
double Scrape(int port, const std::string& name, const std::string& labels) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result res = client.Get("/metrics");
  if (!res || res->status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || line.empty() || line[0] != '{') continue;
    const size_t space = line.rfind(' ');
    if (line.substr(0, space).find(labels) == absl::string_view::npos) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(space + 1), &v)) return v;
  }
  return -1;
}

// A worker the test plays: registered with the job through its own session, it pushes what it
// likes straight to server 0.
class Attacker {
 public:
  void Join(const std::string& scheduler_address) {
    client_ = *SchedulerClient::Create(scheduler_address, absl::Seconds(10), nullptr);
    absl::StatusOr<RegisterResponse> registration = client_->Register(WORKER, "", absl::Seconds(30));
    ASSERT_TRUE(registration.ok()) << registration.status();
    rank_ = registration->rank();
    heartbeater_ = std::make_unique<Heartbeater>(client_.get(), WORKER, rank_, absl::Milliseconds(200),
                                                 absl::Seconds(30), [](absl::Status) {});
    absl::StatusOr<ClusterView> running = client_->WaitUntilRunning(absl::Seconds(30));
    ASSERT_TRUE(running.ok()) << running.status();
    view_ = *running;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    stub_ = ParameterServer::NewStub(
        grpc::CreateCustomChannel(view_.servers(0).address(), grpc::InsecureChannelCredentials(), args));
  }

  // Stops heartbeating, as a worker whose push failed and exited: the job declares it dead.
  void Leave() { heartbeater_.reset(); }

  // A whole push for server 0's chunks with `value` everywhere, `samples` samples.
  PushRequest Gradient(int64_t step, float value, int samples) const {
    PushRequest push;
    push.set_worker_rank(rank_);
    push.set_membership_epoch(view_.membership_epoch());
    push.set_step(step);
    push.set_num_samples(samples);
    push.set_request_id(5000 + step);
    for (const ChunkSpec& c : view_.shard_map().chunks()) {
      if (c.server_rank() != 0) continue;
      TensorChunk* chunk = push.add_chunks();
      chunk->set_tensor_id(c.tensor_id());
      chunk->set_offset(c.offset());
      chunk->set_length(c.length());
      std::vector<float> values(c.length(), value);
      chunk->set_data(values.data(), values.size() * sizeof(float));
    }
    return push;
  }

  absl::Status Push(const PushRequest& push) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(&context, client_->session_credential());
    PushResponse response;
    return FromGrpcStatus(stub_->Push(&context, push, &response));
  }

  absl::StatusOr<PullResponse> Pull() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(&context, client_->session_credential());
    PullRequest request;
    request.set_worker_rank(rank_);
    request.set_membership_epoch(view_.membership_epoch());
    PullResponse response;
    const grpc::Status s = stub_->Pull(&context, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }

  int rank() const { return rank_; }
  const ClusterView& view() const { return view_; }
  SchedulerClient* client() const { return client_.get(); }

 private:
  std::unique_ptr<SchedulerClient> client_;
  std::unique_ptr<Heartbeater> heartbeater_;
  std::unique_ptr<ParameterServer::Stub> stub_;
  ClusterView view_;
  int rank_ = -1;
};

// The server's metrics port, once it has printed it (fails the test after 10 s).
int ServerMetricsPort(const Child& server) {
  int port = 0;
  for (int i = 0; i < 200 && port == 0; ++i) {
    port = MetricsPort(server);
    if (port == 0) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_GT(port, 0) << server.Output();
  return port;
}

// The test is the job's only worker: every push it makes is seen alone, so "nothing applied" is
// exact (the weights it pulls before and after are bitwise equal) and a good push moves the step.
TEST(GradNormTest, HugePushIsRefusedCountedAndChangesNothingWhileAnHonestOneIsApplied) {
  ManualCluster cluster("grad-norm-one");
  // A limit between the honest push's norm (0.1 x sqrt(235146 parameters) = 48.5) and the attack's.
  cluster.Start(1, 0,
                {"--workers=1", "--train_limit=256", "--test_limit=64", "--optimizer=sgd", "--lr=0.5", "--epochs=1",
                 "--max_grad_norm_per_sample=100"},
                {"--metrics_port=-1"});
  Attacker worker;
  ASSERT_NO_FATAL_FAILURE(worker.Join(cluster.address));
  ASSERT_TRUE(worker.client()
                  ->Barrier(kServersReadyBarrier, BarrierRequest::ALL, WORKER, worker.rank(), absl::Seconds(30))
                  .ok());
  const int metrics_port = ServerMetricsPort(*cluster.servers[0]);
  const std::string series = "reason=\"grad_norm\",shard=\"0\"";
  EXPECT_EQ(Scrape(metrics_port, "pstrain_server_refused_pushes_total", series), 0);

  absl::StatusOr<PullResponse> before = worker.Pull();
  ASSERT_TRUE(before.ok()) << before.status();
  const absl::Status refused = worker.Push(worker.Gradient(0, 1e18f, 8));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr(absl::StrCat("push from worker ", worker.rank(), " for step 0: gradient norm ")));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("largest part tensor 'fc1.weight' at offset 0"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("exceeds max_grad_norm_per_sample = 100; nothing applied"));
  absl::StatusOr<PullResponse> after = worker.Pull();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->step(), before->step());
  EXPECT_EQ(after->SerializeAsString(), before->SerializeAsString());
  EXPECT_EQ(Scrape(metrics_port, "pstrain_server_refused_pushes_total", series), 1);

  // One large element is enough: the norm, not the mean, is what is bounded.
  PushRequest spike = worker.Gradient(0, 0.0f, 8);
  const float big = 1000.0f;
  std::memcpy(spike.mutable_chunks(0)->mutable_data()->data() + 40, &big, sizeof(big));
  EXPECT_EQ(worker.Push(spike).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scrape(metrics_port, "pstrain_server_refused_pushes_total", series), 2);

  // An honest push below the limit is applied: the only worker pushed, so step 0 completes.
  ASSERT_TRUE(worker.Push(worker.Gradient(0, 0.1f, 8)).ok());
  absl::StatusOr<PullResponse> applied = worker.Pull();
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->step(), before->step() + 1);
  EXPECT_EQ(Scrape(metrics_port, "pstrain_server_refused_pushes_total", series), 2);
  cluster.scheduler->Kill(SIGKILL);
  cluster.servers[0]->Kill(SIGKILL);
}

// The final test accuracy of a SYNC job of two honest workers, with an attacker as a third member
// from the start when `attack` is set. Both runs have the same global batch.
double RunJob(bool attack) {
  ManualCluster cluster(attack ? "grad-norm-attacked" : "grad-norm-reference");
  cluster.Start(1, 2,
                {"--workers=" + std::to_string(attack ? 3 : 2), "--global_batch=100", "--train_limit=2000",
                 "--test_limit=500", "--batch_size=50", "--epochs=1", "--seed=5", "--max_grad_norm_per_sample=1000"},
                {"--metrics_port=-1", "--metrics_linger_ms=10000"});
  if (attack) {
    Attacker attacker;
    attacker.Join(cluster.address);
    if (::testing::Test::HasFatalFailure()) return -1;
    const int metrics_port = ServerMetricsPort(*cluster.servers[0]);
    // Its first push, whatever step the job is at: the norm is checked before the step or the
    // membership. (The server answers UNAVAILABLE until it has its first cluster view.)
    absl::Status refused = attacker.Push(attacker.Gradient(0, 1e18f, 33));
    for (int i = 0; i < 200 && absl::IsUnavailable(refused); ++i) {
      absl::SleepFor(absl::Milliseconds(50));
      refused = attacker.Push(attacker.Gradient(0, 1e18f, 33));
    }
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("exceeds max_grad_norm_per_sample = 1000"));
    EXPECT_EQ(Scrape(metrics_port, "pstrain_server_refused_pushes_total", "reason=\"grad_norm\",shard=\"0\""), 1);
    // A real worker whose push fails exits: the job declares it dead and goes on without it.
    attacker.Leave();
  }
  const std::string summary = RunToEnd(cluster);
  EXPECT_EQ(JsonNumber(summary, "samples"), 2000) << summary;
  for (auto& server : cluster.servers) server->Kill(SIGKILL);  // lingering for its metrics
  return JsonNumber(summary, "final_test_accuracy");
}

TEST(GradNormTest, HonestJobReachesItsAccuracyDespiteAnAttackerPushing1e18) {
  const double reference = RunJob(false);
  ASSERT_GT(reference, 0.5);
  const double attacked = RunJob(true);
  // Without the guard the attacked job stays near chance (0.1). With it, the attacker's share of
  // the steps it was a member for is all it costs.
  EXPECT_NEAR(attacked, reference, 0.03);
}

}  // namespace
}  // namespace pstrain::testing
