// Memory bounds under abuse, against a real pstrain-server and pstrain-scheduler over real
// sockets, with the test holding valid credentials (it is the job's worker): oversize requests
// are refused with INVALID_ARGUMENT (server) or RESOURCE_EXHAUSTED (scheduler), calls beyond the
// server's bound on bytes in flight get RESOURCE_EXHAUSTED with a retry hint, nothing changes, a
// legitimate push still works, and the server's memory returns close to where it was.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "transport/grpc_status.h"
#include "transport/session_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/played_worker_job.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

class MemoryBoundTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(job_.Start(MakeTempDir("memory-bound"), {}));
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    stub_ = ParameterServer::NewStub(
        grpc::CreateCustomChannel(job_.view.servers(0).address(), grpc::InsecureChannelCredentials(), args));
  }

  void TearDown() override { job_.Finish(); }

  PullResponse Pull() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(&context, job_.client->session_credential());
    PullRequest request;
    request.set_membership_epoch(job_.view.membership_epoch());
    PullResponse response;
    grpc::Status s = stub_->Pull(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  // One answer of a concurrent burst.
  struct Answer {
    grpc::ClientContext context;
    grpc::Status status;
    PushResponse pushed;
    PullResponse pulled;
  };

  // Sends `n` copies of `push` at once; returns their answers.
  std::vector<std::unique_ptr<Answer>> PushBurst(const PushRequest& push, int n) {
    std::vector<std::unique_ptr<Answer>> answers;
    absl::BlockingCounter done(n);
    for (int i = 0; i < n; ++i) {
      answers.push_back(std::make_unique<Answer>());
      Answer* a = answers.back().get();
      a->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
      AttachSession(&a->context, job_.client->session_credential());
      stub_->async()->Push(&a->context, &push, &a->pushed, [a, &done](grpc::Status s) {
        a->status = std::move(s);
        done.DecrementCount();
      });
    }
    done.Wait();
    return answers;
  }

  PlayedWorkerJob job_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

TEST_F(MemoryBoundTest, OversizeAndConcurrentCallsAreRefusedAndMemoryReturns) {
  const pid_t server = job_.server->pid();
  const PullResponse before = Pull();
  absl::SleepFor(absl::Seconds(1));
  const int64_t baseline_kib = ResidentKib(server);
  ASSERT_GT(baseline_kib, 0);

  // 8 concurrent pushes of 32 MiB each: the model is ~0.9 MiB, so far beyond the job's limit.
  PushRequest oversize = job_.GoodPush(0, 0.1f);
  oversize.mutable_chunks(0)->mutable_data()->resize(32 << 20);
  const size_t oversize_bytes = oversize.ByteSizeLong();
  for (const std::unique_ptr<Answer>& a : PushBurst(oversize, 8)) {
    EXPECT_EQ(a->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << a->status.error_message();
    EXPECT_THAT(a->status.error_message(),
                ContainsRegex(absl::StrCat("^push: request of ", oversize_bytes,
                                           " bytes exceeds this job's limit of [0-9]+ bytes$")));
    EXPECT_TRUE(a->context.GetServerTrailingMetadata().count(kRetryAfterMsKey) == 0) << "oversize is final";
  }
  const int64_t peak_kib = ResidentKib(server, "VmHWM:");
  EXPECT_EQ(Pull().SerializeAsString(), before.SerializeAsString()) << "an oversize push changed the model";

  // Parked pulls of the next step hold a whole answer each; past their share (half) of the
  // server's bound on bytes in flight the rest are refused with a retry hint.
  constexpr int kPulls = 60;
  PullRequest next;
  next.set_membership_epoch(job_.view.membership_epoch());
  next.set_step(before.step() + 1);
  std::vector<std::unique_ptr<Answer>> pulls;
  absl::BlockingCounter pulls_done(kPulls);
  absl::Mutex mu;
  int refused = 0;
  for (int i = 0; i < kPulls; ++i) {
    pulls.push_back(std::make_unique<Answer>());
    Answer* a = pulls.back().get();
    a->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    AttachSession(&a->context, job_.client->session_credential());
    stub_->async()->Pull(&a->context, &next, &a->pulled, [a, &pulls_done, &mu, &refused](grpc::Status s) {
      a->status = std::move(s);
      if (a->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        absl::MutexLock lock(&mu);
        ++refused;
      }
      pulls_done.DecrementCount();
    });
  }
  // The refused ones answer at once; the parked ones wait for the step.
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up) {
    absl::MutexLock lock(&mu);
    if (refused > 0) break;
    mu.AwaitWithTimeout(absl::Condition(
                            +[](int* r) { return *r > 0; }, &refused),
                        absl::Milliseconds(100));
  }
  absl::SleepFor(absl::Milliseconds(500));  // every call has arrived
  int parked = 0;
  {
    absl::MutexLock lock(&mu);
    parked = kPulls - refused;
    EXPECT_GT(refused, 0);
    EXPECT_GT(parked, 0);
  }
  // Pulls cannot crowd out the push that releases them: the step completes once, and the parked
  // pulls get its weights.
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(&context, job_.client->session_credential());
    PushResponse pushed;
    const grpc::Status s = stub_->Push(&context, job_.GoodPush(before.step(), 0.1f), &pushed);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(pushed.step(), before.step() + 1);
  }
  pulls_done.Wait();
  int answered = 0;
  for (const std::unique_ptr<Answer>& a : pulls) {
    if (a->status.ok()) {
      ++answered;
      EXPECT_EQ(a->pulled.step(), before.step() + 1);
      continue;
    }
    EXPECT_EQ(a->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << a->status.error_message();
    EXPECT_THAT(a->status.error_message(),
                ContainsRegex("^pull: [0-9]+ bytes would exceed the server's bound of [0-9]+ bytes in flight "
                              "\\([0-9]+ held\\); retry after 100 ms$"));
    const auto& trailers = a->context.GetServerTrailingMetadata();
    auto hint = trailers.find(kRetryAfterMsKey);
    ASSERT_NE(hint, trailers.end());
    EXPECT_EQ(std::string(hint->second.data(), hint->second.size()), "100");
  }
  EXPECT_EQ(answered, parked);
  const PullResponse after = Pull();
  EXPECT_EQ(after.step(), before.step() + 1);
  // SGD, lr 0.5, gradient 0.1: the one step moved every weight by exactly -0.05.
  float w_before, w_after;
  std::memcpy(&w_before, before.chunks(0).data().data(), sizeof(float));
  std::memcpy(&w_after, after.chunks(0).data().data(), sizeof(float));
  EXPECT_NEAR(w_after - w_before, -0.05f, 1e-6);

  // With the step applied, nothing is held: a burst of as many pulls as were refused is admitted.
  // (The previous refusals left no bytes behind.)
  next.set_step(after.step());
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    AttachSession(&context, job_.client->session_credential());
    PullResponse response;
    EXPECT_TRUE(stub_->Pull(&context, next, &response).ok());
  }

  // The server hands the refused calls' memory back a few heartbeats (200 ms) after the burst.
  // What stays is not free memory (a second trim returns only ~3 MiB more): measured +17 to
  // +97 MiB over the baseline after bursts that peaked at +100 to +260 MiB.
  absl::SleepFor(absl::Seconds(3));
  const int64_t after_kib = ResidentKib(server);
  std::cout << "server RSS: baseline " << baseline_kib / 1024 << " MiB, peak " << peak_kib / 1024
            << " MiB during 8 x 32 MiB oversize pushes, " << after_kib / 1024 << " MiB after\n";
  // At least two requests were held at once (how many depends on the machine's load).
  EXPECT_GT(peak_kib, baseline_kib + 64 * 1024) << "the burst did not reach the server";
  if (!kResidentMemoryIsGlibcs) return;
  EXPECT_LT(after_kib, baseline_kib + 128 * 1024) << "baseline " << baseline_kib << " KiB, peak " << peak_kib;
  // Memory came back: at least half a request's worth (what glibc keeps of the freed requests
  // varies with how their buffers were laid out), or, after a burst the machine's load kept low
  // (two requests at once), to within 64 MiB of the baseline. (Measured in CI: peak +77 MiB,
  // after +47 MiB; peak +94 MiB, after +66 MiB.)
  EXPECT_LT(after_kib, std::max(peak_kib - 16 * 1024, baseline_kib + 64 * 1024))
      << "no request's memory came back: baseline " << baseline_kib << " KiB, peak " << peak_kib;
}

TEST_F(MemoryBoundTest, SchedulerRefusesRequestsLargerThanTheJobsModel) {
  std::unique_ptr<Scheduler::Stub> scheduler =
      Scheduler::NewStub(grpc::CreateChannel(job_.address, grpc::InsecureChannelCredentials()));
  FinalModel model;
  model.set_worker_rank(0);
  model.mutable_model_file()->resize(16 << 20);  // the MLP's model file is ~0.9 MiB
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  AttachSession(&context, job_.client->session_credential());
  FinalModelAck ack;
  const grpc::Status s = scheduler->SubmitFinalModel(&context, model, &ack);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("larger than max"));
  // The scheduler goes on: the job is still running.
  grpc::ClientContext status_context;
  status_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  JobStatus status;
  ASSERT_TRUE(scheduler->GetJobStatus(&status_context, JobStatusRequest(), &status).ok());
  EXPECT_EQ(status.state(), RUNNING);
}

}  // namespace
}  // namespace pstrain::testing
