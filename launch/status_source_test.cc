#include "launch/status_source.h"

#include <grpcpp/grpcpp.h>

#include <memory>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "proto/scheduler.grpc.pb.h"

namespace pstrain {
namespace launch {
namespace {

// Answers GetJobStatus with a fixed status; every other rpc is left unimplemented.
class FakeScheduler : public Scheduler::CallbackService {
 public:
  grpc::ServerUnaryReactor* GetJobStatus(grpc::CallbackServerContext* ctx, const JobStatusRequest*,
                                         JobStatus* response) override {
    response->set_state(RUNNING);
    response->set_step(42);
    response->add_epochs_done()->set_test_accuracy(0.5);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

TEST(SchedulerStatusSourceTest, ReturnsTheSchedulersStatus) {
  FakeScheduler service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  auto source = NewSchedulerStatusSource(absl::StrCat("127.0.0.1:", port), absl::Seconds(5));
  absl::StatusOr<JobStatus> status = source->Get();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), RUNNING);
  EXPECT_EQ(status->step(), 42);
  ASSERT_EQ(status->epochs_done_size(), 1);
  EXPECT_DOUBLE_EQ(status->epochs_done(0).test_accuracy(), 0.5);
  server->Shutdown();
}

TEST(SchedulerStatusSourceTest, NoSchedulerIsAnErrorNamingTheAddress) {
  // Find a free port, then close it so nothing listens there.
  int port = 0;
  {
    FakeScheduler service;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(server, nullptr);
    server->Shutdown();
  }
  const std::string address = absl::StrCat("127.0.0.1:", port);
  auto source = NewSchedulerStatusSource(address, absl::Milliseconds(500));
  absl::StatusOr<JobStatus> status = source->Get();
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(status.status().code() == absl::StatusCode::kUnavailable ||
              status.status().code() == absl::StatusCode::kDeadlineExceeded)
      << status.status();
  EXPECT_NE(status.status().message().find(address), absl::string_view::npos) << status.status();
}

}  // namespace
}  // namespace launch
}  // namespace pstrain
