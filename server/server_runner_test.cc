#include "server/server_runner.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "transport/session_metadata.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "model/model_file.h"
#include "server/checkpoint.h"
#include "server/parameter_store.h"
#include "server/server_metrics.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;

// A scheduler that admits one server and one worker at once and reports the job state the test sets.
class FakeScheduler final : public Scheduler::Service {
 public:
  explicit FakeScheduler(bool valid_shard_map) : valid_shard_map_(valid_shard_map) {}

  grpc::Status Register(grpc::ServerContext*, const RegisterRequest* req, RegisterResponse* resp) override {
    absl::MutexLock lock(&mu_);
    server_address_ = req->address();
    metrics_address_ = req->metrics_address();
    resp->set_rank(0);
    resp->mutable_job()->set_mode(SYNC);
    resp->mutable_job()->mutable_optimizer()->set_type(OptimizerSpec::SGD);
    resp->mutable_job()->mutable_optimizer()->set_lr(0.5f);
    resp->set_heartbeat_ms(20);
    resp->set_dead_after_ms(5000);
    if (!initial_model_.empty()) resp->mutable_job()->set_model("external");
    if (!checkpoint_dir_.empty()) {
      resp->mutable_job()->set_checkpoint_dir(checkpoint_dir_);
      resp->mutable_job()->set_checkpoint_every_steps(5);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetInitialModel(grpc::ServerContext*, const InitialModelRequest*, InitialModel* resp) override {
    absl::MutexLock lock(&mu_);
    if (initial_model_.empty()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "initial model: no model declared yet");
    }
    resp->set_model_file(initial_model_);
    return grpc::Status::OK;
  }

  // Makes the job's model "external", declared with this model file; call before the server
  // registers.
  void SetInitialModel(std::string model_file) {
    absl::MutexLock lock(&mu_);
    initial_model_ = std::move(model_file);
  }

  grpc::Status ReportCheckpoints(grpc::ServerContext*, const CheckpointReport* req, CheckpointAck*) override {
    absl::MutexLock lock(&mu_);
    reports_.emplace_back(req->steps().begin(), req->steps().end());
    return grpc::Status::OK;
  }

  grpc::Status GetClusterView(grpc::ServerContext*, const GetClusterViewRequest*, ClusterView* view) override {
    absl::MutexLock lock(&mu_);
    view->set_state(RUNNING);
    view->set_membership_epoch(membership_epoch_);
    view->set_total_steps(10);
    view->add_servers()->set_address(server_address_);
    for (int rank : worker_ranks_) view->add_workers()->set_rank(rank);
    *view->mutable_shard_map() = Map(valid_shard_map_);
    view->set_session_public_key(signer_->public_key());
    if (restore_step_ >= 0) {
      view->set_restore_step(restore_step_);
      view->set_restore_epoch(restore_epoch_);
    }
    return grpc::Status::OK;
  }

  // One tensor "w" of 4 zeros, all on server 0 (a bad map claims 9 elements).
  static ShardMap Map(bool valid = true) {
    ShardMap map;
    TensorSpec* t = map.add_tensors();
    t->set_name("w");
    t->add_shape(4);
    t->set_num_elements(4);
    t->set_init(ZEROS);
    map.add_chunks()->set_length(valid ? 4 : 9);
    return map;
  }

  // Turns checkpointing on (every 5 steps into `dir`); call before the server registers.
  void SetCheckpointDir(const std::string& dir) {
    absl::MutexLock lock(&mu_);
    checkpoint_dir_ = dir;
  }

  // The view asks for a rollback to `step`, set at membership epoch `epoch`.
  void SetRestore(int64_t step, int64_t epoch) {
    absl::MutexLock lock(&mu_);
    restore_step_ = step;
    restore_epoch_ = epoch;
  }

  std::vector<std::vector<int64_t>> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

  grpc::Status Barrier(grpc::ServerContext*, const BarrierRequest* req, BarrierResponse*) override {
    absl::MutexLock lock(&mu_);
    barriers_.push_back(req->name());
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest* req, HeartbeatResponse* resp) override {
    absl::MutexLock lock(&mu_);
    traffic_ = req->traffic();
    resp->set_state(state_);
    resp->set_failure(failure_);
    resp->set_membership_epoch(membership_epoch_);
    for (int shard : wanted_shards_) resp->add_send_final_shards(shard);
    return grpc::Status::OK;
  }

  grpc::Status SubmitFinalShard(grpc::ServerContext*, const FinalShard* req, FinalShardAck*) override {
    absl::MutexLock lock(&mu_);
    final_shards_.push_back(*req);
    if (refuse_shards_) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "tensor 'w' element 0 is nan");
    wanted_shards_.clear();
    return grpc::Status::OK;
  }

  // Heartbeat answers ask for these final shards until one arrives; `refuse`: it is refused.
  void WantShards(std::vector<int> shards, bool refuse = false) {
    absl::MutexLock lock(&mu_);
    wanted_shards_ = std::move(shards);
    refuse_shards_ = refuse;
  }
  // Waits (bounded) for a final shard; returns those received.
  std::vector<FinalShard> WaitForFinalShards() {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !final_shards_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(30));
    return final_shards_;
  }

  grpc::Status ReportFailure(grpc::ServerContext*, const FailureReport* req, FailureResponse*) override {
    absl::MutexLock lock(&mu_);
    failures_.push_back(req->message());
    return grpc::Status::OK;
  }

  void SetMembership(int64_t epoch, std::vector<int> worker_ranks) {
    absl::MutexLock lock(&mu_);
    membership_epoch_ = epoch;
    worker_ranks_ = std::move(worker_ranks);
  }

  void SetState(JobState state, const std::string& failure = "") {
    absl::MutexLock lock(&mu_);
    state_ = state;
    failure_ = failure;
  }

  // Waits (bounded, so a broken runner fails the test instead of hanging it) until the server has
  // entered the servers-ready barrier; returns its address, or "" if it never did.
  std::string WaitUntilReady() {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !barriers_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(60));
    return barriers_.empty() ? "" : server_address_;
  }

  std::string metrics_address() {
    absl::MutexLock lock(&mu_);
    return metrics_address_;
  }
  // Waits (bounded) for a heartbeat reporting `requests` requests; returns the latest traffic.
  // The traffic of the first heartbeat that counts `requests` calls, `refused` of them refused, and
  // `bytes_received` bytes in (a call is counted when it arrives, its bytes and refusal when it is
  // answered, so a heartbeat in between shows the one without the others).
  ServerTraffic WaitForTraffic(int64_t requests, int64_t refused = 0, int64_t bytes_received = 0) {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return traffic_.requests() >= requests && traffic_.refused() >= refused &&
             traffic_.bytes_received() >= bytes_received;
    };
    mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(30));
    return traffic_;
  }

  std::vector<std::string> barriers() {
    absl::MutexLock lock(&mu_);
    return barriers_;
  }
  std::vector<std::string> failures() {
    absl::MutexLock lock(&mu_);
    return failures_;
  }

  // What Register would give worker `rank`: its session credential.
  std::string WorkerCredential(int rank) const { return signer_->Sign({WORKER, rank, ""}); }

 private:
  const bool valid_shard_map_;
  const std::unique_ptr<SessionSigner> signer_ = *SessionSigner::Generate();
  absl::Mutex mu_;
  std::string server_address_ ABSL_GUARDED_BY(mu_);
  std::string metrics_address_ ABSL_GUARDED_BY(mu_);
  ServerTraffic traffic_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> barriers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
  JobState state_ ABSL_GUARDED_BY(mu_) = RUNNING;
  int64_t membership_epoch_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<int> worker_ranks_ ABSL_GUARDED_BY(mu_) = {0};
  std::string failure_ ABSL_GUARDED_BY(mu_);
  std::string checkpoint_dir_ ABSL_GUARDED_BY(mu_);
  int64_t restore_step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t restore_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<int64_t>> reports_ ABSL_GUARDED_BY(mu_);
  std::string initial_model_ ABSL_GUARDED_BY(mu_);
  std::vector<int> wanted_shards_ ABSL_GUARDED_BY(mu_);
  bool refuse_shards_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<FinalShard> final_shards_ ABSL_GUARDED_BY(mu_);
};

// A model file of one tensor `name` [values.size()].
std::string ModelFile(const std::string& name, const std::vector<float>& values) {
  model::ParamSpec p;
  p.name = name;
  p.shape = {static_cast<int64_t>(values.size())};
  p.num_elements = static_cast<int64_t>(values.size());
  absl::StatusOr<std::string> bytes = model::SerializeModelFile({p}, values);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.value_or("");
}

class ServerRunnerTest : public ::testing::Test {
 protected:
  void StartScheduler(bool valid_shard_map = true) {
    scheduler_ = std::make_unique<FakeScheduler>(valid_shard_map);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &scheduler_port_);
    builder.RegisterService(scheduler_.get());
    scheduler_server_ = builder.BuildAndStart();
    ASSERT_NE(scheduler_server_, nullptr);
  }

  void TearDown() override {
    if (scheduler_server_) scheduler_server_->Shutdown();
  }

  std::unique_ptr<ServerRunner> MakeRunner(ServerMetrics* metrics = nullptr, int metrics_port = 0) {
    ServerRunner::Options options;
    options.metrics = metrics;
    options.metrics_port = metrics_port;
    options.metrics_host = "0.0.0.0";
    options.scheduler_address = absl::StrCat("127.0.0.1:", scheduler_port_);
    options.rpc_timeout = absl::Seconds(10);
    options.startup_timeout = absl::Seconds(30);
    auto runner = ServerRunner::Create(options);
    EXPECT_TRUE(runner.ok()) << runner.status();
    return std::move(runner).value();
  }

  // Pulls step 0 from the server at `address` as worker `rank` at membership epoch `epoch`.
  // `credential`: what the call carries instead of worker `rank`'s own session credential.
  grpc::Status PullFrom(const std::string& address, PullResponse* resp, int rank = 0, int64_t epoch = 1,
                        std::optional<std::string> credential = std::nullopt) const {
    auto stub = ParameterServer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    AttachSession(&context, credential.value_or(scheduler_->WorkerCredential(rank)));
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    PullRequest req;
    req.set_worker_rank(rank);
    req.set_membership_epoch(epoch);
    return stub->Pull(&context, req, resp);
  }

  // Pushes a gradient of 4 `value`s for SYNC step `step` as worker 0.
  grpc::Status PushTo(const std::string& address, int64_t step, float value, PushRequest* sent,
                      PushResponse* pushed) const {
    auto stub = ParameterServer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    AttachSession(&context, scheduler_->WorkerCredential(0));
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    sent->set_worker_rank(0);
    sent->set_membership_epoch(1);
    sent->set_step(step);
    sent->set_num_samples(1);
    sent->set_request_id(step + 1);
    TensorChunk* chunk = sent->add_chunks();
    chunk->set_length(4);
    const std::vector<float> grad(4, value);
    chunk->set_data(reinterpret_cast<const char*>(grad.data()), 16);
    return stub->Push(&context, *sent, pushed);
  }

  std::unique_ptr<FakeScheduler> scheduler_;
  std::unique_ptr<grpc::Server> scheduler_server_;
  int scheduler_port_ = 0;
};

TEST_F(ServerRunnerTest, ServesUntilTheJobFinishes) {
  StartScheduler();
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  const std::string address = scheduler_->WaitUntilReady();
  ASSERT_FALSE(address.empty());
  EXPECT_EQ(address, absl::StrCat("127.0.0.1:", runner->port()));
  EXPECT_EQ(scheduler_->barriers(), std::vector<std::string>{"servers-ready"});

  PullResponse pulled;
  grpc::Status pull = PullFrom(address, &pulled);
  ASSERT_TRUE(pull.ok()) << pull.error_message();
  ASSERT_EQ(pulled.chunks_size(), 1);
  EXPECT_EQ(pulled.chunks(0).data(), std::string(16, '\0'));

  scheduler_->SetState(FINISHED);
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_FALSE(PullFrom(address, &pulled).ok());  // no longer listening
}

TEST_F(ServerRunnerTest, SendsItsFinalShardWhenTheSchedulerAsks) {
  StartScheduler();
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  ASSERT_FALSE(scheduler_->WaitUntilReady().empty());
  scheduler_->WantShards({0});
  const std::vector<FinalShard> shards = scheduler_->WaitForFinalShards();
  ASSERT_GE(shards.size(), 1u);
  EXPECT_EQ(shards[0].server_rank(), 0);
  EXPECT_EQ(shards[0].shard(), 0);
  ASSERT_EQ(shards[0].chunks_size(), 1);
  EXPECT_EQ(shards[0].chunks(0).tensor_id(), 0);
  EXPECT_EQ(shards[0].chunks(0).length(), 4);
  EXPECT_EQ(shards[0].chunks(0).data(), std::string(16, '\0'));  // the 4 initial zeros, float32
  scheduler_->SetState(FINISHED);
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST_F(ServerRunnerTest, ARefusedFinalShardFailsTheJob) {
  StartScheduler();
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  ASSERT_FALSE(scheduler_->WaitUntilReady().empty());
  scheduler_->WantShards({0}, /*refuse=*/true);
  thread.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kInvalidArgument) << result;
  EXPECT_THAT(result.message(), HasSubstr("server 0: final shard 0 refused: "));
  EXPECT_THAT(result.message(), HasSubstr("tensor 'w' element 0 is nan"));
  ASSERT_FALSE(scheduler_->failures().empty());
  EXPECT_THAT(scheduler_->failures().back(), HasSubstr("final shard 0 refused"));
}

// The value of the one series of `name` whose labels include each of `labels` (k="v"); NaN when
// there is not exactly one.
double SeriesValue(const std::string& text, const std::string& name, const std::vector<std::string>& labels) {
  double value = std::nan("");
  int found = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name + "{") && !absl::StartsWith(line, name + " ")) continue;
    const size_t space = line.rfind(' ');
    const absl::string_view series = line.substr(0, space);
    bool all = true;
    for (const std::string& l : labels) all = all && absl::StrContains(series, l);
    if (!all) continue;
    ++found;
    value = std::stod(std::string(line.substr(space + 1)));
  }
  return found == 1 ? value : std::nan("");
}

TEST_F(ServerRunnerTest, ServesMetricsThatMatchWhatItMoved) {
  StartScheduler();
  scheduler_->SetCheckpointDir(
      (std::filesystem::path(::testing::TempDir()) / absl::StrCat("metrics-", getpid())).string());
  metrics::Registry registry;
  ServerMetrics server_metrics(&registry);
  absl::StatusOr<std::unique_ptr<HttpServer>> http = ServeMetrics(&registry, "127.0.0.1", 0);
  ASSERT_TRUE(http.ok()) << http.status();
  std::unique_ptr<ServerRunner> runner = MakeRunner(&server_metrics, (*http)->port());
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  const std::string address = scheduler_->WaitUntilReady();
  ASSERT_FALSE(address.empty());
  // Listening everywhere: registered with the server's own host.
  EXPECT_EQ(scheduler_->metrics_address(), absl::StrCat("127.0.0.1:", (*http)->port()));

  // Five SYNC steps (the fifth writes a checkpoint), a pull after each, then refused calls.
  int64_t received = 0, sent = 0;
  for (int step = 0; step < 5; ++step) {
    PushRequest push;
    PushResponse pushed;
    ASSERT_TRUE(PushTo(address, step, 1.0f, &push, &pushed).ok());
    received += static_cast<int64_t>(push.ByteSizeLong());
    sent += static_cast<int64_t>(pushed.ByteSizeLong());
    PullResponse pulled;
    PullRequest pull;
    pull.set_worker_rank(0);
    pull.set_membership_epoch(1);
    ASSERT_TRUE(PullFrom(address, &pulled).ok());
    received += static_cast<int64_t>(pull.ByteSizeLong());
    sent += static_cast<int64_t>(pulled.ByteSizeLong());
  }
  PullResponse ignored;
  PullRequest stale;
  stale.set_worker_rank(0);
  stale.set_membership_epoch(7);
  EXPECT_EQ(PullFrom(address, &ignored, 0, 7).error_code(), grpc::StatusCode::ABORTED);  // reaches shard 0
  received += static_cast<int64_t>(stale.ByteSizeLong());
  PullRequest denied;
  denied.set_worker_rank(0);
  denied.set_membership_epoch(1);
  EXPECT_EQ(PullFrom(address, &ignored, 0, 1, scheduler_->WorkerCredential(1)).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);  // refused before decoding: no shard
  const int64_t none_bytes = static_cast<int64_t>(denied.ByteSizeLong());
  received += none_bytes;

  httplib::Client client("127.0.0.1", (*http)->port());
  httplib::Result got = client.Get("/metrics");
  ASSERT_TRUE(got) << httplib::to_string(got.error());
  ASSERT_EQ(got->status, 200);
  const std::string& text = got->body;
  const std::string rank = "rank=\"0\"";
  EXPECT_EQ(SeriesValue(text, "pstrain_server_requests_total", {rank, "role=\"server\"", "method=\"Push\""}), 5);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_requests_total", {"method=\"Pull\""}), 7);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_request_duration_seconds_count", {"method=\"Pull\""}), 7);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_refused_requests_total", {"cause=\"aborted\""}), 1);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_refused_requests_total", {"cause=\"permission_denied\""}), 1);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_refused_requests_total", {"cause=\"invalid_argument\""}), 0);
  const double shard0 = SeriesValue(text, "pstrain_server_received_bytes_total", {"shard=\"0\""});
  EXPECT_EQ(SeriesValue(text, "pstrain_server_received_bytes_total", {"shard=\"none\""}), none_bytes);
  EXPECT_EQ(shard0 + none_bytes, received);
  const double sent_bytes = SeriesValue(text, "pstrain_server_sent_bytes_total", {"shard=\"0\""});
  EXPECT_EQ(sent_bytes, sent);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_step", {"shard=\"0\"", "replica=\"false\""}), 5);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_step_wait_seconds_count", {"shard=\"0\""}), 5);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_parked_calls", {"shard=\"0\""}), 0);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_inflight_requests", {rank}), 0);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_checkpoints_written_total", {"shard=\"0\""}), 1);
  EXPECT_EQ(SeriesValue(text, "pstrain_server_checkpoint_duration_seconds_count", {"shard=\"0\""}), 1);
  const double age = SeriesValue(text, "pstrain_server_checkpoint_age_seconds", {"shard=\"0\""});
  EXPECT_GE(age, 0);
  EXPECT_LT(age, 60);

  // The scrape, the heartbeat and the server's own counters are one source.
  const ServerTraffic traffic = server_metrics.Traffic();
  EXPECT_EQ(traffic.bytes_received(), received);
  EXPECT_EQ(traffic.bytes_sent(), static_cast<int64_t>(sent_bytes));
  EXPECT_EQ(traffic.requests(), 12);
  EXPECT_EQ(traffic.refused(), 2);
  const ServerTraffic beat = scheduler_->WaitForTraffic(12, 2, received);
  EXPECT_EQ(beat.bytes_received(), received);
  EXPECT_EQ(beat.refused(), 2);

  scheduler_->SetState(FINISHED);
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
  // After Run the series keep their final values.
  got = client.Get("/metrics");
  ASSERT_TRUE(got);
  EXPECT_EQ(SeriesValue(got->body, "pstrain_server_step", {"shard=\"0\""}), 5);
}

TEST_F(ServerRunnerTest, CallersMustBeTheWorkerTheirSessionNames) {
  StartScheduler();
  scheduler_->SetMembership(1, {0, 1});
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  const std::string address = scheduler_->WaitUntilReady();
  ASSERT_FALSE(address.empty());

  PullResponse pulled;
  grpc::Status none = PullFrom(address, &pulled, 0, 1, "");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED) << none.error_message();
  EXPECT_THAT(none.error_message(), HasSubstr("Pull: no session credential"));
  grpc::Status other = PullFrom(address, &pulled, 0, 1, scheduler_->WorkerCredential(1));
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED) << other.error_message();
  EXPECT_EQ(other.error_message(), "Pull: worker 1's session may not act as worker 0");
  const std::string foreign = (*SessionSigner::Generate())->Sign({WORKER, 0, ""});
  grpc::Status forged = PullFrom(address, &pulled, 0, 1, foreign);
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::UNAUTHENTICATED) << forged.error_message();
  EXPECT_TRUE(PullFrom(address, &pulled, 1, 1).ok());

  scheduler_->SetState(FINISHED);
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST_F(ServerRunnerTest, AnExternalModelStartsFromTheDeclaredValues) {
  StartScheduler();
  const std::vector<float> declared = {1.5f, -2.0f, 3.0f, 0.25f};
  scheduler_->SetInitialModel(ModelFile("w", declared));
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  const std::string address = scheduler_->WaitUntilReady();
  ASSERT_FALSE(address.empty());
  PullResponse pulled;
  grpc::Status pull = PullFrom(address, &pulled);
  ASSERT_TRUE(pull.ok()) << pull.error_message();
  ASSERT_EQ(pulled.chunks_size(), 1);
  EXPECT_EQ(pulled.chunks(0).data(), std::string(reinterpret_cast<const char*>(declared.data()), 16));
  scheduler_->SetState(FINISHED);
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST_F(ServerRunnerTest, ADeclaredModelThatDoesNotFitTheShardMapFailsTheJob) {
  StartScheduler();
  scheduler_->SetInitialModel(ModelFile("v", {1, 2, 3, 4}));
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  const absl::Status result = runner->Run();
  EXPECT_EQ(result.code(), absl::StatusCode::kFailedPrecondition) << result;
  EXPECT_THAT(result.message(), HasSubstr("the declared initial model's tensor 0 is 'v'"));
  ASSERT_EQ(scheduler_->failures().size(), 1u);
  EXPECT_THAT(scheduler_->failures()[0], HasSubstr("fetching the initial model"));
}

TEST_F(ServerRunnerTest, FollowsMembershipChangesFromHeartbeats) {
  StartScheduler();
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  const std::string address = scheduler_->WaitUntilReady();
  ASSERT_FALSE(address.empty());
  PullResponse pulled;
  grpc::Status before = PullFrom(address, &pulled, /*rank=*/3, /*epoch=*/2);
  EXPECT_EQ(before.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(before.error_message(), HasSubstr("server 0 is at membership epoch 1, the pull carries 2"));

  // Worker 0 died and worker 3 joined: the server learns it from a heartbeat (every 20 ms).
  scheduler_->SetMembership(2, {3});
  grpc::Status after = PullFrom(address, &pulled, 3, 2);
  for (int i = 0; i < 500 && after.error_code() == grpc::StatusCode::ABORTED; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    after = PullFrom(address, &pulled, 3, 2);
  }
  EXPECT_TRUE(after.ok()) << after.error_message();
  grpc::Status removed = PullFrom(address, &pulled, 0, 2);
  EXPECT_EQ(removed.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(removed.error_message(), HasSubstr("worker 0 is not a live member at membership epoch 2"));

  scheduler_->SetState(FINISHED);
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST_F(ServerRunnerTest, FailedJobEndsRunWithAborted) {
  StartScheduler();
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result;
  std::thread thread([&] { result = runner->Run(); });
  ASSERT_FALSE(scheduler_->WaitUntilReady().empty());
  scheduler_->SetState(FAILED, "worker 1 died");
  thread.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(result.message(), "job failed: worker 1 died");
}

TEST_F(ServerRunnerTest, StopEndsRunWithOk) {
  StartScheduler();
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  ASSERT_FALSE(scheduler_->WaitUntilReady().empty());
  runner->Stop();
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST_F(ServerRunnerTest, BadShardMapIsReportedToTheScheduler) {
  StartScheduler(/*valid_shard_map=*/false);
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = runner->Run();
  EXPECT_EQ(result.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.message()), HasSubstr("server 0: shard map: chunk 0 of tensor 'w' covers [0, 9)"));
  ASSERT_EQ(scheduler_->failures().size(), 1u);
  EXPECT_THAT(scheduler_->failures()[0], HasSubstr("covers [0, 9)"));
  EXPECT_TRUE(scheduler_->barriers().empty());
}

// A fresh, empty folder per test.
std::string TestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = absl::StrCat(::testing::TempDir(), "runner-", getpid(), "-", info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes server 0's checkpoint of `step` for FakeScheduler::Map with weights `w`.
void WriteServerCheckpoint(const std::string& dir, int64_t step, const std::vector<float>& w) {
  ParameterStore::Options options;
  options.job.mutable_optimizer()->set_type(OptimizerSpec::SGD);
  options.job.mutable_optimizer()->set_lr(0.5f);
  options.shard_map = FakeScheduler::Map();
  options.num_workers = 1;
  auto store = ParameterStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status();
  auto ckpt = (*store)->Checkpoint();
  ASSERT_TRUE(ckpt.ok());
  ckpt->step = step;
  ckpt->weights = w;
  ASSERT_TRUE(WriteCheckpoint(CheckpointPath(dir, 0, step), *ckpt).ok());
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST_F(ServerRunnerTest, ReplacementReportsCheckpointsAndRollsBackBeforeServing) {
  const std::string dir = TestDir();
  WriteServerCheckpoint(dir, 5, {9, 9, 9, 9});
  WriteServerCheckpoint(dir, 10, {1, 2, 3, 4});
  StartScheduler();
  scheduler_->SetCheckpointDir(dir);
  scheduler_->SetRestore(10, 1);  // the view the replacement starts from asks for step 10
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  const std::string address = scheduler_->WaitUntilReady();
  ASSERT_FALSE(address.empty());
  PullResponse pulled;
  grpc::Status pull = PullFrom(address, &pulled);
  ASSERT_TRUE(pull.ok()) << pull.error_message();
  EXPECT_EQ(pulled.step(), 10);
  ASSERT_EQ(pulled.chunks_size(), 1);
  EXPECT_EQ(Floats(pulled.chunks(0).data()), (std::vector<float>{1, 2, 3, 4}));
  ASSERT_FALSE(scheduler_->reports().empty());
  EXPECT_EQ(scheduler_->reports()[0], (std::vector<int64_t>{5, 10}));

  scheduler_->SetState(FINISHED);
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST_F(ServerRunnerTest, RecoveryInANewEpochRollsBackToTheInitialWeights) {
  const std::string dir = TestDir();
  StartScheduler();
  scheduler_->SetCheckpointDir(dir);
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  const std::string address = scheduler_->WaitUntilReady();
  ASSERT_FALSE(address.empty());

  // Another server was replaced; there is no checkpoint yet, so everyone restarts from step 0.
  scheduler_->SetRestore(0, 2);
  scheduler_->SetMembership(2, {0});
  PullResponse pulled;
  grpc::Status after = PullFrom(address, &pulled, 0, 2);
  for (int i = 0; i < 500 && after.error_code() == grpc::StatusCode::ABORTED; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    after = PullFrom(address, &pulled, 0, 2);
  }
  ASSERT_TRUE(after.ok()) << after.error_message();
  EXPECT_EQ(pulled.step(), 0);
  EXPECT_EQ(pulled.chunks(0).data(), std::string(16, '\0'));
  EXPECT_TRUE(scheduler_->failures().empty());

  scheduler_->SetState(FINISHED);
  thread.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST_F(ServerRunnerTest, MissingRestoreCheckpointFailsTheJob) {
  const std::string dir = TestDir();
  StartScheduler();
  scheduler_->SetCheckpointDir(dir);
  std::unique_ptr<ServerRunner> runner = MakeRunner();
  absl::Status result = absl::UnknownError("Run did not return");
  std::thread thread([&] { result = runner->Run(); });
  ASSERT_FALSE(scheduler_->WaitUntilReady().empty());

  scheduler_->SetRestore(15, 2);  // this server has no checkpoint of step 15
  scheduler_->SetMembership(2, {0});
  thread.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(result.message()), HasSubstr("server 0: rolling back to step 15 for membership epoch 2: "));
  ASSERT_EQ(scheduler_->failures().size(), 1u);
  EXPECT_THAT(scheduler_->failures()[0], HasSubstr("rolling back to step 15"));
}

TEST(ServerRunnerOptionsTest, CreateRefusesBadOptions) {
  ServerRunner::Options options;
  EXPECT_EQ(ServerRunner::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.scheduler_address = "127.0.0.1:1";
  options.port = 70000;
  auto runner = ServerRunner::Create(options);
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(runner.status().message()), HasSubstr("port 70000 is outside [0, 65535]"));
}

}  // namespace
}  // namespace pstrain::server
