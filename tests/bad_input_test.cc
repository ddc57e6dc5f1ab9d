// Malformed pushes sent over real gRPC to a real pstrain-server process: each gets a precise,
// non-OK status, and the server's state is unchanged afterwards.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/barriers.h"
#include "common/scheduler_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::HasSubstr;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("bad-input");
    std::string port_file = dir_ + "/scheduler.port";
    auto scheduler = Child::Start({BinDir() + "/pstrain-scheduler", "--port=0", "--port_file=" + port_file,
                                   "--servers=1", "--workers=1", "--train_limit=256", "--test_limit=64",
                                   "--optimizer=sgd", "--lr=0.5", "--epochs=1", "--heartbeat_ms=200"},
                                  dir_ + "/scheduler.log");
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::make_unique<Child>(*scheduler);
    std::string port;
    for (int i = 0; i < 300 && port.empty(); ++i) {
      absl::SleepFor(absl::Milliseconds(50));
      port = std::string(absl::StripAsciiWhitespace(ReadFile(port_file)));
    }
    ASSERT_FALSE(port.empty()) << scheduler_->Output();
    address_ = absl::StrCat("127.0.0.1:", port);
    auto server = Child::Start({BinDir() + "/pstrain-server", "--scheduler=" + address_, "--port=0"},
                               dir_ + "/server.log");
    ASSERT_TRUE(server.ok());
    server_ = std::make_unique<Child>(*server);

    // This test plays the only worker.
    client_ = *SchedulerClient::Create(address_, absl::Seconds(10));
    auto registration = client_->Register(WORKER, "", absl::Seconds(30));
    ASSERT_TRUE(registration.ok()) << registration.status();
    heartbeater_ = std::make_unique<Heartbeater>(client_.get(), WORKER, registration->rank(),
                                                 absl::Milliseconds(200), absl::Seconds(30),
                                                 [](absl::Status) {});
    auto view = client_->WaitUntilRunning(absl::Seconds(30));
    ASSERT_TRUE(view.ok()) << view.status();
    view_ = *view;
    ASSERT_TRUE(client_->Barrier(kServersReadyBarrier, BarrierRequest::ALL, WORKER, 0, absl::Seconds(30)).ok());
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    stub_ = ParameterServer::NewStub(grpc::CreateCustomChannel(view_.servers(0).address(),
                                                               grpc::InsecureChannelCredentials(), args));
  }

  void TearDown() override {
    if (client_ != nullptr) {
      // Finish the job so both processes exit on their own: evaluate (pretend to) every evaluation
      // lease of the only epoch, then report done.
      for (int i = 0; i < 1000; ++i) {
        absl::StatusOr<LeaseResponse> lease = client_->LeaseEval(0, 0);
        ASSERT_TRUE(lease.ok()) << lease.status();
        if (lease->epoch_done()) break;
        if (lease->wait()) continue;
        ProgressReport report;
        report.set_worker_rank(0);
        EvalStats* eval = report.add_evals();
        eval->set_lease_id(lease->lease_id());
        eval->set_samples(lease->end() - lease->begin());
        ASSERT_TRUE(client_->ReportProgress(report).ok());
      }
      ProgressReport done;
      done.set_worker_rank(0);
      done.set_done(true);
      ASSERT_TRUE(client_->ReportProgress(done).ok());
    }
    heartbeater_.reset();
    if (server_ != nullptr) {
      auto code = server_->Wait(absl::Seconds(20));
      EXPECT_TRUE(code.ok() && *code == 0) << server_->Output();
      server_->Kill(SIGKILL);
    }
    if (scheduler_ != nullptr) {
      auto code = scheduler_->Wait(absl::Seconds(20));
      EXPECT_TRUE(code.ok() && *code == 0) << scheduler_->Output();
      scheduler_->Kill(SIGKILL);
    }
  }

  // A well-formed push of `value` everywhere for `step`.
  PushRequest GoodPush(int64_t step, float value) {
    PushRequest push;
    push.set_worker_rank(0);
    push.set_membership_epoch(view_.membership_epoch());
    push.set_step(step);
    push.set_num_samples(8);
    push.set_request_id(1000 + step);
    for (const ChunkSpec& c : view_.shard_map().chunks()) {
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
    PushResponse response;
    return FromGrpcStatus(stub_->Push(&context, push, &response));
  }

  PullResponse Pull() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
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

  std::string dir_;
  std::string address_;
  std::unique_ptr<Child> scheduler_, server_;
  std::unique_ptr<SchedulerClient> client_;
  std::unique_ptr<Heartbeater> heartbeater_;
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

  PushRequest stranger = GoodPush(0, 0.1f);
  stranger.set_worker_rank(3);
  ExpectRefusedAndUnchanged(stranger, absl::StatusCode::kAborted, "not a live member");

  PushRequest old_epoch = GoodPush(0, 0.1f);
  old_epoch.set_membership_epoch(view_.membership_epoch() - 1);
  ExpectRefusedAndUnchanged(old_epoch, absl::StatusCode::kAborted, "membership epoch");

  PushRequest negative = GoodPush(0, 0.1f);
  negative.set_num_samples(-4);
  ExpectRefusedAndUnchanged(negative, absl::StatusCode::kInvalidArgument, "");

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

}  // namespace
}  // namespace pstrain::testing
