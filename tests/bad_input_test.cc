// Malformed pushes sent over real gRPC to a real pstrain-server process: each gets a precise,
// non-OK status, and the server's state is unchanged afterwards. And bad flags and files given to
// the binaries (sizes too large to allocate, FIFOs, devices, folders, unwritable outputs, models of
// NaN): each run ends at once with a non-zero exit and a message naming the flag or the file,
// writes nothing, and never hangs (every run has a deadline).
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transport/grpc_status.h"
#include "common/barriers.h"
#include "scheduler/client/scheduler_client.h"
#include "transport/session_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "proto/ps.grpc.pb.h"
#include "server/checkpoint.h"
#include "tests/cluster.h"
#include "tests/played_worker_job.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(job_.Start(MakeTempDir("bad-input"), {}));
    view_ = job_.view;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    stub_ = ParameterServer::NewStub(
        grpc::CreateCustomChannel(view_.servers(0).address(), grpc::InsecureChannelCredentials(), args));
  }

  void TearDown() override { job_.Finish(); }

  PushRequest GoodPush(int64_t step, float value) const { return job_.GoodPush(step, value); }

  absl::Status Push(const PushRequest& push) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(&context, job_.client->session_credential());
    PushResponse response;
    return FromGrpcStatus(stub_->Push(&context, push, &response));
  }

  PullResponse Pull() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(&context, job_.client->session_credential());
    PullRequest request;
    request.set_membership_epoch(view_.membership_epoch());
    PullResponse response;
    grpc::Status s = stub_->Pull(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  void ExpectRefusedAndUnchanged(const PushRequest& push, absl::StatusCode code, const std::string& text) {
    PullResponse before = Pull();
    absl::Status s = Push(push);
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(text));
    PullResponse after = Pull();
    EXPECT_EQ(after.step(), before.step());
    EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  }

  PlayedWorkerJob job_;
  ClusterView view_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

TEST_F(BadInputTest, EveryMalformedPushIsRefusedAndChangesNothing) {
  PushRequest unknown = GoodPush(0, 0.1f);
  unknown.mutable_chunks(0)->set_tensor_id(99);
  ExpectRefusedAndUnchanged(unknown, absl::StatusCode::kInvalidArgument, "unknown tensor id 99");

  PushRequest short_chunk = GoodPush(0, 0.1f);
  short_chunk.mutable_chunks(0)->mutable_data()->resize(12);
  ExpectRefusedAndUnchanged(short_chunk, absl::StatusCode::kInvalidArgument, "fc1.weight");

  PushRequest missing = GoodPush(0, 0.1f);
  missing.mutable_chunks()->RemoveLast();
  ExpectRefusedAndUnchanged(missing, absl::StatusCode::kInvalidArgument, "");

  PushRequest future = GoodPush(5, 0.1f);
  ExpectRefusedAndUnchanged(future, absl::StatusCode::kFailedPrecondition, "future");

  PushRequest nan = GoodPush(0, 0.1f);
  float bad = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.mutable_chunks(1)->mutable_data()->data(), &bad, sizeof(bad));
  ExpectRefusedAndUnchanged(nan, absl::StatusCode::kInvalidArgument, "nan");

  // Another rank than the session's: refused before the store sees it (tests/security_test.cc
  // tries every method this way).
  PushRequest stranger = GoodPush(0, 0.1f);
  stranger.set_worker_rank(3);
  ExpectRefusedAndUnchanged(stranger, absl::StatusCode::kPermissionDenied,
                            "worker 0's session may not act as worker 3");

  PushRequest old_epoch = GoodPush(0, 0.1f);
  old_epoch.set_membership_epoch(view_.membership_epoch() - 1);
  ExpectRefusedAndUnchanged(old_epoch, absl::StatusCode::kAborted, "membership epoch");

  PushRequest negative = GoodPush(0, 0.1f);
  negative.set_num_samples(-4);
  ExpectRefusedAndUnchanged(negative, absl::StatusCode::kInvalidArgument, "");

  // Well-formed, but never handed out: more samples than the job's global batch, a data epoch
  // past the job's last.
  PushRequest inflated = GoodPush(0, 0.1f);
  inflated.set_num_samples(1'000'000);
  ExpectRefusedAndUnchanged(inflated, absl::StatusCode::kInvalidArgument, "num_samples is 1000000, expected 0 to 256");
  PushRequest far_epoch = GoodPush(0, 0.1f);
  far_epoch.set_data_epoch(1000);
  ExpectRefusedAndUnchanged(far_epoch, absl::StatusCode::kInvalidArgument, "data_epoch is 1000, expected 0 to 0");

  // After all that, a good push is applied: the only worker pushed, so step 0 completes.
  PullResponse before = Pull();
  ASSERT_TRUE(Push(GoodPush(0, 0.1f)).ok());
  PullResponse after = Pull();
  EXPECT_EQ(after.step(), before.step() + 1);
  // SGD, lr 0.5, gradient 0.1: every weight moved by exactly -0.05.
  float w_before, w_after;
  std::memcpy(&w_before, before.chunks(0).data().data(), sizeof(float));
  std::memcpy(&w_after, after.chunks(0).data().data(), sizeof(float));
  EXPECT_NEAR(w_after - w_before, -0.05f, 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Bad flags and files at the binaries.

struct BadRun {
  std::string flag;      // the flag under test (for the failure message)
  std::string expected;  // a text the binary's output must hold: the flag, the file, what is wrong
};

// Runs `binary` with `args`; it must fail (exit != 0) within 20 s, printing `expected`.
void ExpectFailsAtOnce(const std::string& binary, const std::vector<std::string>& args, const std::string& expected) {
  std::vector<std::string> argv = {BinDir() + "/" + binary};
  argv.insert(argv.end(), args.begin(), args.end());
  const absl::Time start = absl::Now();
  absl::StatusOr<RunResult> run = testing::Run(argv, absl::Seconds(20));
  ASSERT_TRUE(run.ok()) << binary << " " << absl::StrJoin(args, " ") << ": " << run.status();
  EXPECT_NE(run->exit_code, 0) << binary << " " << absl::StrJoin(args, " ") << "\n" << run->output;
  EXPECT_THAT(run->output, HasSubstr(expected)) << binary << " " << absl::StrJoin(args, " ");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << binary << " " << absl::StrJoin(args, " ");
}

// Only the names in `dir`, sorted.
std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(BadFlagsTest, SchedulerAndLauncherRefuseBadFilesAndSizesBeforeStarting) {
  const std::string dir = MakeTempDir("bad-flags");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string folder = dir + "/folder";
  std::filesystem::create_directory(folder);
  const std::string plain = dir + "/plain.txt";
  { std::ofstream(plain) << "not a folder\n"; }
  // A data folder whose files are FIFOs: reading one would block forever.
  const std::string fifo_data = dir + "/fifo-data";
  std::filesystem::create_directory(fifo_data);
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"}) {
    ASSERT_EQ(::mkfifo((fifo_data + "/" + name).c_str(), 0600), 0);
  }
  const std::vector<std::string> before = Listing(dir);
  // Every run would write these if it got as far as the job.
  const std::vector<std::string> outputs = {"--summary_json=" + dir + "/summary.json", "--port_file=" + dir + "/port"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      // 12: sizes checked before anything is allocated.
      {{"--hidden=2000000000,2000000000"}, "hidden_sizes[0] (--hidden): got 2000000000, expected in [1, 1048576]"},
      {{"--hidden=60000,60000"}, "a model of at most 1073741824 parameters"},
      // With the input layer (known once the data is read): 784 x 1048576 + 1048576 x 1000 + ...
      {{"--hidden=1048576,1000"},
       "model 'mlp' with layers [784, 1048576, 1000, 10] has 1871709160 parameters, "
       "expected at most 1073741824 (4 GiB of float32): make --hidden narrower"},
      // 13: no hang on a FIFO or a device.
      {{"--config=" + fifo}, "--config (job config): '" + fifo + "' is a FIFO, expected a regular file"},
      {{"--config=/dev/zero"}, "--config (job config): '/dev/zero' is a character device, expected a regular file"},
      {{"--data_dir=" + fifo_data}, "not a regular file (a FIFO, device or socket), expected a data file"},
      {{"--tls_cert=/dev/zero", "--tls_key=/dev/zero", "--tls_ca=/dev/zero", "--job_token_file=/dev/zero"},
       "'/dev/zero' is a character device, expected a regular file"},
      // 14: a folder as the config; --final_model where nothing can be written.
      {{"--config=" + folder}, "--config (job config): '" + folder + "' is a folder, expected a regular file"},
      {{"--final_model=" + dir + "/missing/model.bin"}, "--final_model: the folder '" + dir + "/missing'"},
      {{"--final_model=" + plain + "/model.bin"},
       "--final_model: '" + plain + "' (the folder of '" + plain + "/model.bin') is a regular file, expected a folder"},
      {{"--final_model=" + folder}, "--final_model: '" + folder + "' is a folder"},
      // 15: the output mode is octal permission bits the owner can read.
      {{"--output_mode=0999"}, "--output_mode: got '0999'"},
      {{"--output_mode=0044"}, "--output_mode: got '0044'"},
      // A table dtype that does not exist.
      {{"--model=ctr", "--table_row_dtype=int8"}, "--table_row_dtype: got 'int8', expected fp32, fp16 or bf16"},
      // A data stream: its folder must exist, and the job must be one a stream can feed.
      {{"--model=ctr", "--data_stream=" + dir + "/no-stream"}, "data stream '" + dir + "/no-stream': no such folder"},
      {{"--model=ctr", "--data_stream=" + folder, "--epochs=2"}, "got 2, expected 1 for a job on a data stream"},
      {{"--model=ctr", "--data_stream=" + folder, "--lr_schedule=cosine"}, "optimizer.schedule"},
      {{"--data_stream=" + folder}, "models 'ctr' and 'external' train on a stream"},
      // An ASYNC job resumes from its scheduler's saved state, which a job without --state_dir has not.
      {{"--mode=async", "--checkpoint_dir=" + dir + "/no-checkpoints", "--resume"},
       "expected the first run's --state_dir (none given)"},
      {{"--model=external", "--data_stream=" + dir + "/no-stream"},
       "data stream '" + dir + "/no-stream': no such folder"},
      {{"--model=external", "--data_stream=" + folder, "--train_samples=100"}, "expected 0 for a job on a data stream"},
  };
  for (const auto& [flags, expected] : cases) {
    std::vector<std::string> args = {"--port=0"};
    args.insert(args.end(), outputs.begin(), outputs.end());
    args.insert(args.end(), flags.begin(), flags.end());
    ExpectFailsAtOnce("pstrain-scheduler", args, expected);
  }
  // The launcher reads the same job flags, before it starts anything.
  ExpectFailsAtOnce("pstrain-launch", {"--summary_json=" + dir + "/summary.json", "--final_model=" + plain + "/m.bin"},
                    "--final_model: '" + plain + "' (the folder of");
  ExpectFailsAtOnce("pstrain-launch", {"--summary_json=" + dir + "/summary.json", "--config=/dev/zero"},
                    "'/dev/zero' is a character device");
  EXPECT_EQ(Listing(dir), before) << "a refused run wrote a file";
}

TEST(BadFlagsTest, EvalRefusesDevicesFifosFoldersAndModelsOfNan) {
  const std::string dir = MakeTempDir("bad-models");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectFailsAtOnce("pstrain-eval", {"--model=/dev/zero"},
                    "--model=/dev/zero: FAILED_PRECONDITION: model file: '/dev/zero' is a character device");
  ExpectFailsAtOnce("pstrain-eval", {"--model=/dev/urandom"}, "'/dev/urandom' is a character device");
  ExpectFailsAtOnce("pstrain-eval", {"--model=" + fifo}, "'" + fifo + "' is a FIFO, expected a regular file");
  ExpectFailsAtOnce("pstrain-eval", {"--model=" + dir}, "'" + dir + "' is a folder, expected a regular file");

  // A well-formed file with a valid checksum whose values hold a NaN (or an infinity): refused,
  // naming the tensor and the element, instead of an accuracy computed from NaN.
  std::vector<model::ParamSpec> params(2);
  params[0].name = "fc1.weight";
  params[0].shape = {784, 4};
  params[0].num_elements = 784 * 4;
  params[1].name = "fc1.bias";
  params[1].shape = {4};
  params[1].num_elements = 4;
  params[1].flat_offset = 784 * 4;
  std::vector<float> values(784 * 4 + 4, 0.01f);
  values[784 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_model = dir + "/nan.bin";
  ASSERT_TRUE(model::WriteModelFile(nan_model, params, values).ok());
  ExpectFailsAtOnce("pstrain-eval", {"--model=" + nan_model}, "tensor 'fc1.bias' element 2 is nan");
  values[784 * 4 + 2] = 0;
  values[17] = -std::numeric_limits<float>::infinity();
  ASSERT_TRUE(model::WriteModelFile(nan_model, params, values).ok());
  ExpectFailsAtOnce("pstrain-eval", {"--model=" + nan_model}, "tensor 'fc1.weight' element 17 is -inf");
}

TEST(BadFlagsTest, LauncherFailsAtOnceWhenEveryWorkerCommandFails) {
  const std::string dir = MakeTempDir("worker-cmd-false");
  const absl::Time start = absl::Now();
  absl::StatusOr<RunResult> run = testing::Run(
      {BinDir() + "/pstrain-launch", "--worker_cmd=false", "--epochs=1", "--train_limit=256", "--test_limit=64",
       "--summary_json=" + dir + "/summary.json", "--final_model=" + dir + "/model.bin"},
      absl::Seconds(60));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_NE(run->exit_code, 0) << run->output;
  EXPECT_THAT(run->output, HasSubstr("every worker exited before the job started"));
  // Not the 300 s start-up timeout: as soon as the last worker is gone.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.bin"));
}

TEST(BadFilesTest, ResumeFromACheckpointOfNanFailsNamingTheChunkAndElement) {
  const std::string checkpoints = MakeTempDir("nan-ckpt");
  const std::vector<std::string> job = {"--servers=1",
                                        "--workers=1",
                                        "--epochs=2",
                                        "--batch_size=64",
                                        "--train_limit=512",
                                        "--test_limit=64",
                                        "--seed=3",
                                        "--checkpoint_dir=" + checkpoints,
                                        "--checkpoint_every_steps=4"};
  absl::StatusOr<ClusterRun> first = LaunchCluster("nan-first", job, absl::Minutes(2));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->exit_code, 0) << first->output;
  // The newest checkpoint, rewritten with a NaN weight and a valid checksum (what a bit flip in
  // memory before the write, or a hand-made file, would give).
  absl::StatusOr<int64_t> step = server::LatestConsistentStep(checkpoints, 1);
  ASSERT_TRUE(step.ok()) << step.status();
  const std::string path = server::CheckpointPath(checkpoints, 0, *step);
  absl::StatusOr<server::ShardCheckpoint> ckpt = server::ReadCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ckpt->weights[7] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(server::WriteCheckpoint(path, *ckpt).ok());

  std::vector<std::string> resumed = job;
  resumed.push_back("--resume");
  absl::StatusOr<ClusterRun> second = LaunchCluster("nan-resumed", resumed, absl::Minutes(2));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->exit_code, 0) << second->output;
  EXPECT_THAT(
      second->output,
      HasSubstr(absl::StrCat("checkpoint '", path, "': chunk 0 (tensor id ", ckpt->chunks[0].tensor_id(), " at offset ",
                             ckpt->chunks[0].offset(), "): weight element ", ckpt->chunks[0].offset() + 7, " is nan")));
  EXPECT_FALSE(std::filesystem::exists(second->model_path)) << "a model trained from NaN was written";
}

// The mode of `path`'s permission bits, or -1 when it cannot be read.
int ModeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
}

TEST(OutputModeTest, ModelSummaryAndCheckpointsAreTheOwnersOnlyUnlessShared) {
  for (const auto& [flag, mode] : std::vector<std::pair<std::string, int>>{{"", 0600}, {"--output_mode=0640", 0640}}) {
    SCOPED_TRACE(flag.empty() ? "default" : flag);
    const std::string checkpoints = MakeTempDir("modes-ckpt");
    std::vector<std::string> flags = {"--servers=1",
                                      "--workers=1",
                                      "--epochs=1",
                                      "--max_steps=4",
                                      "--batch_size=64",
                                      "--train_limit=512",
                                      "--test_limit=64",
                                      "--checkpoint_dir=" + checkpoints,
                                      "--checkpoint_every_steps=2"};
    if (!flag.empty()) flags.push_back(flag);
    absl::StatusOr<ClusterRun> run = LaunchCluster("modes", flags, absl::Minutes(2));
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_EQ(run->exit_code, 0) << run->output;
    EXPECT_EQ(ModeOf(run->model_path), mode) << run->model_path;
    EXPECT_EQ(ModeOf(std::filesystem::path(run->model_path).parent_path() / "summary.json"), mode);
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) {
      if (entry.path().extension() != ".ckpt") continue;
      ++files;
      EXPECT_EQ(ModeOf(entry.path()), mode) << entry.path();
    }
    EXPECT_GT(files, 0) << "no checkpoint written";
  }
}

}  // namespace
}  // namespace pstrain::testing
