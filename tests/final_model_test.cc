// The final model of a real secured job (mutual TLS and a job token; real pstrain-scheduler,
// pstrain-server and pstrain-worker processes on real sockets) is the servers' own: an insider who
// registers as a worker of its own and submits a model mid-epoch is refused and nothing is
// written; the job finishes with the file the scheduler assembled from the servers' shards, bit
// for bit what the servers hold after the last step and what an undisturbed run writes, and
// pstrain-eval on it gives the job's accuracy.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "transport/job_credentials.h"
#include "scheduler/client/scheduler_client.h"
#include "transport/session_metadata.h"
#include "transport/transport_security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "proto/scheduler.grpc.pb.h"
#include "server/checkpoint.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

// SYNC, 2 servers, 2 workers: 16384 / (32 x 2) = 256 steps (long enough that the insider, who
// registers after step 8 on a loaded machine, still finds the job running), a checkpoint every 64,
// so the servers' files of step 256 hold what they ended with.
constexpr int64_t kSteps = 256;

std::vector<std::string> Job(const std::string& dir) {
  return {"--epochs=1",
          "--train_limit=16384",
          "--test_limit=1000",
          "--batch_size=32",
          "--seed=3",
          "--checkpoint_dir=" + dir + "/ckpt",
          "--checkpoint_every_steps=64",
          "--final_model=" + dir + "/model.bin"};
}

class FinalModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("final-model-credentials");
    absl::StatusOr<JobCredentials> made = MakeJobCredentials(dir_);
    ASSERT_TRUE(made.ok()) << made.status();
    job_ = *made;
    // The insider holds a worker's files.
    credentials_ = job_.For(CertRole::kWorker);
    absl::StatusOr<std::shared_ptr<const TransportSecurity>> security = TransportSecurity::Create(credentials_);
    ASSERT_TRUE(security.ok()) << security.status();
    security_ = *security;
  }

  void Start(ManualCluster& cluster) {
    const std::vector<std::string> tls = TransportSecurityFlags(job_.For(CertRole::kScheduler));
    std::vector<std::string> scheduler_flags = Job(cluster.dir());
    scheduler_flags.insert(scheduler_flags.end(), tls.begin(), tls.end());
    cluster.Start(2, 2, scheduler_flags, TransportSecurityFlags(job_.For(CertRole::kServer)),
                  TransportSecurityFlags(job_.For(CertRole::kWorker)));
  }

  // Waits until the job (over TLS) has applied `steps` steps.
  void WaitForSteps(const std::string& address, int64_t steps) {
    auto client = SchedulerClient::Create(address, absl::Seconds(2), security_);
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<JobStatus> status;
    for (int i = 0; i < 600; ++i) {
      status = (*client)->GetJobStatus();
      if (status.ok() && status->step() >= steps) return;
      absl::SleepFor(absl::Milliseconds(50));
    }
    FAIL() << "the job never reached step " << steps << ": " << status.status();
  }

  // Every role exits 0; returns the run summary.
  static std::string ExpectFinished(ManualCluster& cluster) {
    absl::StatusOr<int> code = cluster.scheduler->Wait(absl::Seconds(120));
    EXPECT_TRUE(code.ok() && *code == 0) << cluster.scheduler->Output();
    for (auto* group : {&cluster.workers, &cluster.servers}) {
      for (auto& role : *group) {
        absl::StatusOr<int> rc = role->Wait(absl::Seconds(60));
        EXPECT_TRUE(rc.ok() && *rc == 0) << role->Output();
      }
    }
    const std::string summary = ReadFile(cluster.summary_path());
    EXPECT_THAT(summary, HasSubstr("\"state\": \"FINISHED\"")) << summary;
    return summary;
  }

  std::string dir_;
  JobCredentials job_;
  TransportSecurityOptions credentials_;
  std::shared_ptr<const TransportSecurity> security_;
};

TEST_F(FinalModelTest, AnInsidersModelIsRefusedAndTheServersModelIsWritten) {
  ManualCluster reference("final-model-reference");
  ASSERT_NO_FATAL_FAILURE(Start(reference));
  ExpectFinished(reference);
  absl::StatusOr<model::ModelFile> undisturbed = model::ReadModelFile(reference.dir() + "/model.bin");
  ASSERT_TRUE(undisturbed.ok()) << undisturbed.status();

  ManualCluster cluster("final-model");
  ASSERT_NO_FATAL_FAILURE(Start(cluster));
  const std::string model_path = cluster.dir() + "/model.bin";
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(cluster.address, 8));

  // The insider: the job's certificate and token, registered as a worker with a session of its own.
  auto insider = SchedulerClient::Create(cluster.address, absl::Seconds(10), security_);
  ASSERT_TRUE(insider.ok()) << insider.status();
  absl::StatusOr<RegisterResponse> registered = (*insider)->Register(WORKER, "", absl::Seconds(10));
  ASSERT_TRUE(registered.ok()) << registered.status();
  ASSERT_EQ(registered->job_state(), RUNNING);
  const int rank = registered->rank();
  auto stub = Scheduler::NewStub(security_->NewChannel(cluster.address, grpc::ChannelArguments()));
  auto context = [&] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(c.get(), (*insider)->session_credential());
    return c;
  };
  // A well-formed one-tensor model file, as small as they come.
  std::vector<model::ParamSpec> params(1);
  params[0].name = "x";
  params[0].shape = {1};
  params[0].num_elements = 1;
  FinalModel bogus;
  bogus.set_worker_rank(rank);
  bogus.set_model_file(*model::SerializeModelFile(params, std::vector<float>{1.0f}));
  FinalModelAck ack;
  grpc::Status refused = stub->SubmitFinalModel(context().get(), bogus, &ack);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("no member submits the final model"));
  // Nor can it pass for a server sending a shard, its own rank or another's.
  for (int server_rank : {rank, 0}) {
    FinalShard shard;
    shard.set_server_rank(server_rank);
    shard.set_shard(0);
    FinalShardAck shard_ack;
    refused = stub->SubmitFinalShard(context().get(), shard, &shard_ack);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  }
  EXPECT_FALSE(std::filesystem::exists(model_path)) << "written mid-epoch";
  // It leaves, so that the SYNC job does not wait for its pushes.
  ASSERT_TRUE((*insider)->Leave(WORKER, rank, "done probing").ok());

  const std::string summary = ExpectFinished(cluster);
  EXPECT_THAT(cluster.scheduler->Output(), HasSubstr("final model assembled from 2 shards"));
  absl::StatusOr<model::ModelFile> written = model::ReadModelFile(model_path);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->params.size(), undisturbed->params.size());
  EXPECT_EQ(written->values, undisturbed->values);  // Bitwise.

  // What the servers hold after the last step: their checkpoints of it, assembled.
  std::vector<float> assembled(written->values.size(), -12345.0f);
  int64_t covered = 0;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<server::ShardCheckpoint> ckpt =
        server::ReadCheckpoint(server::CheckpointPath(cluster.dir() + "/ckpt", rank, kSteps));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    int64_t at = 0;
    for (const ChunkSpec& chunk : ckpt->chunks) {
      const int64_t base = written->params[chunk.tensor_id()].flat_offset + chunk.offset();
      for (int64_t i = 0; i < chunk.length(); ++i) assembled[base + i] = ckpt->weights[at + i];
      at += chunk.length();
      covered += chunk.length();
    }
  }
  EXPECT_EQ(covered, static_cast<int64_t>(written->values.size()));
  EXPECT_EQ(assembled, written->values);  // Bitwise.

  // pstrain-eval on the file gives the job's own accuracy.
  absl::StatusOr<RunResult> eval = pstrain::testing::Run(
      {BinDir() + "/pstrain-eval", "--model=" + model_path, "--test_limit=1000"}, absl::Seconds(60));
  ASSERT_TRUE(eval.ok()) << eval.status();
  ASSERT_EQ(eval->exit_code, 0) << eval->output;
  const std::string::size_type at = eval->output.find("test_accuracy=");
  ASSERT_NE(at, std::string::npos) << eval->output;
  const double accuracy = std::stod(eval->output.substr(at + std::string("test_accuracy=").size()));
  EXPECT_NEAR(accuracy, JsonNumber(summary, "final_test_accuracy"), 1e-6) << eval->output << summary;
  EXPECT_GT(accuracy, 0.5);
}

}  // namespace
}  // namespace pstrain::testing
