// A job of an external model through the whole scheduler process logic (SchedulerRunner) over
// real gRPC, with the test playing a server and a worker through SchedulerClient: the worker
// declares a model larger than gRPC's default message limit, and an embedding table, the job
// runs, the server fetches the initial model and sees the table in the view, and a restarted
// scheduler (--state_dir) still has both.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/client/scheduler_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "scheduler/scheduler_runner.h"

namespace pstrain {
namespace scheduler {
namespace {

using ::testing::HasSubstr;

// Waits (bounded) until the runner listens; 0 if it never does.
int AwaitPort(const SchedulerRunner& runner) {
  for (int i = 0; i < 600 && runner.port() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return runner.port();
}

// "emb.weight" [3, 1 << 20] (12 MiB: three times gRPC's default message limit) and "emb.bias" [3].
std::string BigModel() {
  std::vector<model::ParamSpec> params(2);
  params[0].name = "emb.weight";
  params[0].shape = {3, 1 << 20};
  params[0].num_elements = 3 << 20;
  params[1].name = "emb.bias";
  params[1].shape = {3};
  params[1].num_elements = 3;
  params[1].flat_offset = 3 << 20;
  std::vector<float> values(params[1].flat_offset + 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) * 0.001f;
  return *model::SerializeModelFile(params, values);
}

// Worker `rank`'s declaration of `model_file` with the bias averaged and one embedding table
// "user" of `table_dim` floats per row.
ModelDeclaration Declaration(int rank, const std::string& model_file, int64_t test_samples,
                             std::vector<std::string> averaged, int table_dim) {
  ModelDeclaration d;
  d.set_worker_rank(rank);
  d.set_model_file(model_file);
  d.set_train_samples(64);
  d.set_test_samples(test_samples);
  for (std::string& name : averaged) d.add_averaged_tensors(std::move(name));
  TableSpec* table = d.add_tables();
  table->set_name("user");
  table->set_dim(table_dim);
  return d;
}

class DeclaredJobRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/declared-runner-", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }

  // An external model's job of 1 server and 1 worker whose data folder does not exist: the
  // scheduler must not read it.
  std::unique_ptr<SchedulerRunner> Runner() {
    JobSpec job;
    job.set_model("external");
    job.set_num_servers(1);
    job.set_num_workers(1);
    job.set_epochs(2);
    job.set_batch_size(8);
    job.mutable_data()->set_data_dir(dir_ + "/no-such-data");
    job.mutable_data()->set_test_samples(10);
    SchedulerRunner::Options options;
    options.heartbeat_interval = absl::Milliseconds(100);
    options.dead_after = absl::Seconds(20);
    options.startup_timeout = absl::Seconds(60);
    options.state_dir = dir_ + "/state";
    options.reconnect = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<SchedulerRunner>> runner = SchedulerRunner::Create(job, options);
    EXPECT_TRUE(runner.ok()) << runner.status();
    return std::move(runner).value();
  }

  static std::unique_ptr<SchedulerClient> Client(int port) {
    return *SchedulerClient::Create(absl::StrCat("127.0.0.1:", port), absl::Seconds(20));
  }

  std::string dir_;
};

TEST_F(DeclaredJobRunnerTest, AWorkersDeclarationRunsTheJobAndSurvivesARestart) {
  const std::string model_file = BigModel();
  ASSERT_GT(model_file.size(), 12u << 20);
  std::unique_ptr<SchedulerRunner> runner = Runner();
  std::future<absl::Status> result = std::async(std::launch::async, [&] { return runner->Run(); });
  const int port = AwaitPort(*runner);
  ASSERT_GT(port, 0);

  std::unique_ptr<SchedulerClient> server = Client(port);
  std::unique_ptr<SchedulerClient> worker = Client(port);
  ASSERT_TRUE(server->Register(SERVER, "127.0.0.1:1", absl::Seconds(20)).ok());
  absl::StatusOr<RegisterResponse> registered = worker->Register(WORKER, "", absl::Seconds(20));
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->job().model(), "external");
  // Every role registered, no model yet: the job waits, and there is nothing to fetch.
  EXPECT_EQ(server->WaitUntilRunning(absl::Milliseconds(300)).status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::Status early = server->GetInitialModel().status();
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(early.message(), HasSubstr("no model declared yet"));

  // The job pins 10 test samples. The bias is averaged, not trained.
  const int rank = registered->rank();
  absl::Status refused = worker->DeclareModel(Declaration(rank, model_file, 12, {"emb.bias"}, 8));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("worker 0 declares 12 test samples; the job pins 10"));
  ASSERT_TRUE(worker->DeclareModel(Declaration(rank, model_file, 10, {"emb.bias"}, 8)).ok());

  absl::StatusOr<ClusterView> view = server->WaitUntilRunning(absl::Seconds(20));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->state(), RUNNING);
  ASSERT_EQ(view->shard_map().tensors_size(), 2);
  EXPECT_EQ(view->shard_map().tensors(1).name(), "emb.bias");
  EXPECT_FALSE(view->shard_map().tensors(0).averaged());
  EXPECT_TRUE(view->shard_map().tensors(1).averaged());
  EXPECT_EQ(view->shard_map().chunks_size(), 4);  // 12 MiB in 4 MiB chunks, and the bias
  EXPECT_EQ(view->train_samples(), 64);
  EXPECT_EQ(view->test_samples(), 10);
  EXPECT_EQ(view->total_steps(), 2 * 64 / 8);
  // The job declares no tables: the declaration's is the job's, with the job's table optimizer.
  ASSERT_EQ(view->tables_size(), 1);
  EXPECT_EQ(view->tables(0).name(), "user");
  EXPECT_EQ(view->tables(0).dim(), 8);
  EXPECT_EQ(view->tables(0).optimizer().type(), SparseOptimizerSpec::ADAGRAD);
  absl::StatusOr<std::string> fetched = server->GetInitialModel();
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_TRUE(*fetched == model_file);

  // A scheduler started again on the same state folder has the same model.
  runner->Stop();
  EXPECT_EQ(result.get().code(), absl::StatusCode::kCancelled);
  std::unique_ptr<SchedulerRunner> restarted = Runner();
  std::future<absl::Status> result2 = std::async(std::launch::async, [&] { return restarted->Run(); });
  ASSERT_EQ(AwaitPort(*restarted), port);
  absl::StatusOr<std::string> again = Client(port)->GetInitialModel();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == model_file);
  absl::StatusOr<ClusterView> view2 = Client(port)->WaitUntilRunning(absl::Seconds(20));
  ASSERT_TRUE(view2.ok()) << view2.status();
  EXPECT_EQ(view2->shard_map().chunks_size(), 4);
  EXPECT_TRUE(view2->shard_map().tensors(1).averaged());
  ASSERT_EQ(view2->tables_size(), 1);
  EXPECT_EQ(view2->tables(0).dim(), 8);
  // A second declaration still has to match, averaged tensors and tables included.
  EXPECT_TRUE(worker->DeclareModel(Declaration(rank, model_file, 10, {"emb.bias"}, 8)).ok());
  absl::Status trained = worker->DeclareModel(Declaration(rank, model_file, 10, {}, 8));
  EXPECT_EQ(trained.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trained.message(), HasSubstr("worker 0 declares tensor 'emb.bias' as trained; the job averages it"));
  absl::Status wider = worker->DeclareModel(Declaration(rank, model_file, 10, {"emb.bias"}, 16));
  EXPECT_EQ(wider.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wider.message(),
              HasSubstr("worker 0 declares table 'user' with dim 16; the job's table 'user' has dim 8"));
  restarted->Stop();
  EXPECT_EQ(result2.get().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace scheduler
}  // namespace pstrain
