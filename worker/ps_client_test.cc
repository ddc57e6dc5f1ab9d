// PsClient's connections: how many it opens to a server, how calls spread over them, and that
// UpdateServers redials every one. A recording ParameterServer on 127.0.0.1 tells connections
// apart by the peer address (the client's port) each call arrives from.
#include "worker/ps_client.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "transport/grpc_status.h"
#include "common/host_id.h"
#include "common/tensor_messages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"

namespace pstrain::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// Answers Pull (empty, or as AnswerPullsWith says) and FinishEpoch with empty messages, and
// records the peer of every call.
class RecordingServer : public ParameterServer::CallbackService {
 public:
  // Listens on 127.0.0.1:0, or on `unix_address` when given.
  explicit RecordingServer(const std::string& unix_address = "") {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(unix_address.empty() ? "127.0.0.1:0" : unix_address, grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    CHECK(server_ != nullptr && port != 0) << "cannot listen";
    address_ = unix_address.empty() ? absl::StrCat("127.0.0.1:", port) : unix_address;
  }
  ~RecordingServer() override { server_->Shutdown(); }

  const std::string& address() const { return address_; }
  // The next `calls` pushes and pulls are refused with RESOURCE_EXHAUSTED, with a retry hint of
  // `retry_after_ms` unless it is negative.
  void Refuse(int calls, int retry_after_ms) {
    absl::MutexLock lock(&mu_);
    refuse_ = calls;
    retry_after_ms_ = retry_after_ms;
  }
  // Every later pull is answered with `answer`.
  void AnswerPullsWith(PullResponse answer) {
    absl::MutexLock lock(&mu_);
    pull_answer_ = std::move(answer);
  }
  std::vector<uint64_t> push_ids() {
    absl::MutexLock lock(&mu_);
    return push_ids_;
  }
  std::vector<std::string> peers() {
    absl::MutexLock lock(&mu_);
    return peers_;
  }

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context, const PullRequest*,
                                 PullResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      *response = pull_answer_;
    }
    return Record(context);
  }
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context, const PushRequest* request,
                                 PushResponse*) override {
    {
      absl::MutexLock lock(&mu_);
      push_ids_.push_back(request->request_id());
    }
    return Record(context);
  }
  grpc::ServerUnaryReactor* FinishEpoch(grpc::CallbackServerContext* context, const FinishEpochRequest*,
                                        FinishEpochResponse*) override {
    return Record(context);
  }

 private:
  grpc::ServerUnaryReactor* Record(grpc::CallbackServerContext* context) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    absl::MutexLock lock(&mu_);
    peers_.push_back(context->peer());
    if (refuse_ > 0) {
      --refuse_;
      if (retry_after_ms_ >= 0) context->AddTrailingMetadata(kRetryAfterMsKey, absl::StrCat(retry_after_ms_));
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy"));
    } else {
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<std::string> peers_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> push_ids_ ABSL_GUARDED_BY(mu_);
  int refuse_ ABSL_GUARDED_BY(mu_) = 0;
  int retry_after_ms_ ABSL_GUARDED_BY(mu_) = 0;
  PullResponse pull_answer_ ABSL_GUARDED_BY(mu_);
};

ClusterView ViewOf(const std::string& address) {
  ClusterView view;
  ServerInfo* server = view.add_servers();
  server->set_rank(0);
  server->set_address(address);
  return view;
}

std::unique_ptr<PsClient> NewClient(const ClusterView& view, int tcp_connections) {
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(view, absl::Seconds(30), /*unix_sockets=*/true, tcp_connections);
  CHECK(client.ok()) << client.status();
  return *std::move(client);
}

// One call after another, so each takes the next connection in turn.
void PullInTurn(PsClient* client, int calls) {
  PullRequest request;
  for (int i = 0; i < calls; ++i) {
    IncomingPull response;
    absl::Status result;
    absl::BlockingCounter done(1);
    client->PullAsync(0, &request, &response, [&](absl::Status s) {
      result = std::move(s);
      done.DecrementCount();
    });
    done.Wait();
    ASSERT_TRUE(result.ok()) << result;
  }
}

TEST(PsClientTest, CallsTakeATcpServersConnectionsInTurn) {
  RecordingServer server;
  std::unique_ptr<PsClient> client = NewClient(ViewOf(server.address()), /*tcp_connections=*/2);
  EXPECT_EQ(client->num_connections(0), 2);
  PullInTurn(client.get(), 3);
  ASSERT_TRUE(client->FinishEpochAll(FinishEpochRequest()).ok());  // the typed stub, 4th call
  const std::vector<std::string> peers = server.peers();
  ASSERT_THAT(peers, SizeIs(4));
  EXPECT_NE(peers[0], peers[1]) << "two channels that share one connection";
  EXPECT_THAT(peers, ElementsAre(peers[0], peers[1], peers[0], peers[1]));
}

TEST(PsClientTest, OneTcpConnectionCarriesEveryCall) {
  RecordingServer server;
  std::unique_ptr<PsClient> client = NewClient(ViewOf(server.address()), /*tcp_connections=*/1);
  EXPECT_EQ(client->num_connections(0), 1);
  PullInTurn(client.get(), 3);
  const std::vector<std::string> peers = server.peers();
  EXPECT_THAT(peers, ElementsAre(peers[0], peers[0], peers[0]));
}

TEST(PsClientTest, UpdateServersRedialsEveryConnection) {
  RecordingServer old_server;
  RecordingServer new_server;
  std::unique_ptr<PsClient> client = NewClient(ViewOf(old_server.address()), /*tcp_connections=*/2);
  PullInTurn(client.get(), 2);
  client->UpdateServers(ViewOf(new_server.address()));
  EXPECT_EQ(client->num_connections(0), 2);
  PullInTurn(client.get(), 4);
  EXPECT_THAT(old_server.peers(), SizeIs(2));
  const std::vector<std::string> peers = new_server.peers();
  ASSERT_THAT(peers, SizeIs(4));
  EXPECT_NE(peers[0], peers[1]);
  EXPECT_THAT(peers, ElementsAre(peers[0], peers[1], peers[0], peers[1]));
}

TEST(PsClientTest, AServerOnThisHostGetsOneUnixSocketConnection) {
  const std::string path = absl::StrCat("unix:/tmp/pstrain-ps-client-test-", getpid(), ".sock");
  RecordingServer server(path);
  ClusterView view = ViewOf("127.0.0.1:1");  // nothing listens there: the call must go to the socket
  view.mutable_servers(0)->mutable_local()->set_unix_address(path);
  view.mutable_servers(0)->mutable_local()->set_host_id(HostId());
  std::unique_ptr<PsClient> client = NewClient(view, /*tcp_connections=*/4);
  EXPECT_EQ(client->num_connections(0), 1);
  PullInTurn(client.get(), 2);
  EXPECT_THAT(server.peers(), SizeIs(2));
}

TEST(PsClientTest, CreateRejectsFewerThanOneConnection) {
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(ViewOf("127.0.0.1:1"), absl::Seconds(1), /*unix_sockets=*/false, /*tcp_connections=*/0);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr("0 TCP connections per server, expected 1 or more"));
}

// Destroying the client as soon as the last answer is in must wait until gRPC is done with the
// calls (their contexts hold the channels); the race tripped an assertion in gRPC.
TEST(PsClientTest, DestroyingTheClientRightAfterItsAnswersIsSafe) {
  RecordingServer server;
  for (int round = 0; round < 50; ++round) {
    std::unique_ptr<PsClient> client = NewClient(ViewOf(server.address()), /*tcp_connections=*/2);
    PullRequest request;
    std::vector<IncomingPull> responses(4);
    std::atomic<int> ok{0};
    absl::BlockingCounter done(4);
    for (IncomingPull& response : responses) {
      client->PullAsync(0, &request, &response, [&](absl::Status s) {
        if (s.ok()) ++ok;
        done.DecrementCount();
      });
    }
    done.Wait();
    client.reset();
    ASSERT_EQ(ok.load(), 4) << "round " << round;
  }
}

// Answers of a megabyte, several at once over two connections, read on the caller's thread once
// the last callback is in: every byte as the server sent it. Under ThreadSanitizer this is the
// path of the one report its whole run raised in our code (docs/testing.md, "Sanitizers"): gRPC
// reads the socket into a buffer on one of its threads and may run the callback on another.
TEST(PsClientTest, LargeAnswersArriveWholeOnTheCallersThread) {
  constexpr int kChunks = 4;
  constexpr int kChunkBytes = 256 << 10;
  PullResponse answer;
  for (int c = 0; c < kChunks; ++c) {
    TensorChunk* chunk = answer.add_chunks();
    chunk->set_tensor_id(c);
    chunk->set_length(kChunkBytes / 4);
    std::string data(kChunkBytes, '\0');
    for (int i = 0; i < kChunkBytes; ++i) data[i] = static_cast<char>((i * 7 + c) & 0xff);
    chunk->set_data(std::move(data));
  }
  RecordingServer server;
  server.AnswerPullsWith(answer);
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(ViewOf(server.address()), absl::Seconds(60), /*unix_sockets=*/false, /*tcp_connections=*/2);
  ASSERT_TRUE(client.ok()) << client.status();
  PullRequest request;
  std::string copy(kChunkBytes, '\0');
  for (int round = 0; round < 25; ++round) {
    constexpr int kCalls = 4;
    std::vector<IncomingPull> responses(kCalls);
    std::vector<absl::Status> results(kCalls);
    absl::BlockingCounter done(kCalls);
    for (int i = 0; i < kCalls; ++i) {
      (*client)->PullAsync(0, &request, &responses[i], [&, i](absl::Status s) {
        results[i] = std::move(s);
        done.DecrementCount();
      });
    }
    done.Wait();
    for (int i = 0; i < kCalls; ++i) {
      ASSERT_TRUE(results[i].ok()) << results[i];
      ASSERT_EQ(responses[i].values.size(), static_cast<size_t>(kChunks));
      for (int c = 0; c < kChunks; ++c) {
        ASSERT_EQ(responses[i].values[c].size(), static_cast<size_t>(kChunkBytes));
        responses[i].values[c].CopyTo(copy.data());
        ASSERT_EQ(copy, answer.chunks(c).data()) << "round " << round << ", call " << i << ", chunk " << c;
      }
      ReleaseValues(&responses[i]);
    }
  }
}

absl::Status PushOnce(PsClient* client, uint64_t request_id) {
  OutgoingPush push;
  push.header.set_request_id(request_id);
  PushResponse response;
  absl::Status result;
  absl::BlockingCounter done(1);
  client->PushAsync(0, &push, &response, [&](absl::Status s) {
    result = std::move(s);
    done.DecrementCount();
  });
  done.Wait();
  return result;
}

TEST(PsClientTest, RefusedPushIsSentAgainAfterTheHintWithTheSameRequestId) {
  RecordingServer server;
  server.Refuse(3, /*retry_after_ms=*/30);
  std::unique_ptr<PsClient> client = NewClient(ViewOf(server.address()), /*tcp_connections=*/2);
  const absl::Time start = absl::Now();
  {
    absl::Status r = PushOnce(client.get(), 77);
    EXPECT_TRUE(r.ok()) << r;
  }
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  EXPECT_THAT(server.push_ids(), ElementsAre(77u, 77u, 77u, 77u));
}

TEST(PsClientTest, ResourceExhaustedWithoutHintIsFinal) {
  RecordingServer server;
  server.Refuse(1, /*retry_after_ms=*/-1);
  std::unique_ptr<PsClient> client = NewClient(ViewOf(server.address()), /*tcp_connections=*/1);
  const absl::Status s = PushOnce(client.get(), 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("busy"));
  EXPECT_THAT(server.push_ids(), SizeIs(1));
}

TEST(PsClientTest, RetriesStopAtTheCallsDeadline) {
  RecordingServer server;
  server.Refuse(1000, /*retry_after_ms=*/100);
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(ViewOf(server.address()), absl::Milliseconds(450), /*unix_sockets=*/false, 1);
  ASSERT_TRUE(client.ok());
  const absl::Time start = absl::Now();
  const absl::Status s = PushOnce(client->get(), 9);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(450));
  EXPECT_THAT(server.push_ids().size(), ::testing::AllOf(::testing::Ge(3u), ::testing::Le(5u)));
}

TEST(PsClientTest, CancelAllEndsACallWaitingToBeRetried) {
  RecordingServer server;
  server.Refuse(1000, /*retry_after_ms=*/1000);
  std::unique_ptr<PsClient> client = NewClient(ViewOf(server.address()), /*tcp_connections=*/1);
  PullRequest request;
  IncomingPull response;
  absl::Status result;
  absl::BlockingCounter done(1);
  client->PullAsync(0, &request, &response, [&](absl::Status s) {
    result = std::move(s);
    done.DecrementCount();
  });
  absl::SleepFor(absl::Milliseconds(200));  // refused once, waiting for its retry
  const absl::Time start = absl::Now();
  client->CancelAll("job failed");
  done.Wait();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
  EXPECT_THAT(server.peers(), SizeIs(1));
}

}  // namespace
}  // namespace pstrain::worker
