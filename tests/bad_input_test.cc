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
#include "common/session_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
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
    stub_ = ParameterServer::NewStub(grpc::CreateCustomChannel(view_.servers(0).address(),
                                                               grpc::InsecureChannelCredentials(), args));
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
  ExpectRefusedAndUnchanged(stranger, absl::StatusCode::kPermissionDenied, "worker 0's session may not act as worker 3");

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

}  // namespace
}  // namespace pstrain::testing
