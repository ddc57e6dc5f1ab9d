#include "server/ps_service.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/session_credential.h"
#include "transport/session_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

using ::testing::HasSubstr;

// One tensor "w" {8} (zeros), all on server 0; SGD with lr 0.5 and two workers.
ParameterStore::Options StoreOptions() {
  ParameterStore::Options options;
  options.rank = 0;
  options.job.set_mode(SYNC);
  options.job.mutable_optimizer()->set_type(OptimizerSpec::SGD);
  options.job.mutable_optimizer()->set_lr(0.5f);
  TensorSpec* t = options.shard_map.add_tensors();
  t->set_id(0);
  t->set_name("w");
  t->add_shape(8);
  t->set_num_elements(8);
  t->set_init(ZEROS);
  ChunkSpec* c = options.shard_map.add_chunks();
  c->set_tensor_id(0);
  c->set_length(8);
  c->set_server_rank(0);
  options.num_workers = 2;
  options.membership_epoch = 1;
  options.total_steps = 10;
  return options;
}

PushRequest MakePush(int rank, int64_t step, float value) {
  PushRequest req;
  req.set_worker_rank(rank);
  req.set_membership_epoch(1);
  req.set_step(step);
  req.set_num_samples(1);
  req.set_request_id(rank + 1);
  TensorChunk* chunk = req.add_chunks();
  chunk->set_tensor_id(0);
  chunk->set_length(8);
  std::vector<float> grad(8, value);
  chunk->set_data(reinterpret_cast<const char*>(grad.data()), 4 * grad.size());
  return req;
}

std::vector<float> Values(const PullResponse& resp) {
  EXPECT_EQ(resp.chunks_size(), 1);
  if (resp.chunks_size() != 1) return {};
  std::vector<float> out(resp.chunks(0).data().size() / 4);
  std::memcpy(out.data(), resp.chunks(0).data().data(), 4 * out.size());
  return out;
}

class PsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials());
    stub_ = ParameterServer::NewStub(channel_);
  }

  void TearDown() override {
    if (store_) store_->Shutdown();
    server_->Shutdown();
  }

  void InstallStore() {
    auto store = ParameterStore::Create(StoreOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
    service_.SetStore(store_.get());
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return context;
  }

  ParameterServerService service_;
  std::unique_ptr<ParameterStore> store_;  // outlives server_'s calls: shut down in TearDown
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

constexpr int64_t kGranted = 1'800'000'000'000;  // when the scheduler handed lease 7 out (ms)

// ASYNC with sessions: a push must come from its own session and carry a grant of its lease that
// covers its batch and sample count. Batch size 4; worker 1 holds lease 7 = [0, 10) of data epoch
// 0 from batch 1 on (batches 1 and 2, of 4 and 2 samples).
TEST_F(PsServiceTest, LeasedPushesNeedTheirGrant) {
  std::unique_ptr<SessionSigner> signer = *SessionSigner::Generate();
  ParameterStore::Options options = StoreOptions();
  options.job.set_mode(ASYNC);
  options.job.set_batch_size(4);
  options.job.set_epochs(1);
  auto store = ParameterStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status();
  store_ = std::move(store).value();
  service_.RequireSessions(*SessionVerifier::Create(signer->public_key()), {/*leased_pushes=*/true, 4});
  service_.SetStore(store_.get());

  const LeaseGrant lease{1, 0, 7, 0, 10, 1, kGranted};
  auto push = [&](const std::string& session, const std::string& grant, int64_t batch, int64_t samples,
                  int64_t granted = kGranted) {
    PushRequest req = MakePush(1, 0, 1.0f);
    req.set_lease_id(7);
    req.set_lease_batch(batch);
    req.set_num_samples(samples);
    req.set_lease_grant(grant);
    req.set_lease_granted_unix_ms(granted);
    auto context = Context();
    AttachSession(context.get(), session);
    PushResponse pushed;
    return stub_->Push(context.get(), req, &pushed);
  };
  const std::string worker1 = signer->Sign({WORKER, 1, ""});
  const std::string grant = signer->SignLease(lease);
  struct Case {
    std::string name, session, grant;
    int64_t batch, samples;
    grpc::StatusCode code;
    std::string message;
  };
  LeaseGrant others = lease;
  others.worker_rank = 0;
  const std::vector<Case> cases = {
      {"no session", "", grant, 1, 4, grpc::StatusCode::UNAUTHENTICATED, "Push: no session credential"},
      {"a server's session", signer->Sign({SERVER, 1, ""}), grant, 1, 4, grpc::StatusCode::PERMISSION_DENIED,
       "Push: server 1 may not call a parameter server; only workers do"},
      {"another worker's session", signer->Sign({WORKER, 0, ""}), grant, 1, 4, grpc::StatusCode::PERMISSION_DENIED,
       "Push: worker 0's session may not act as worker 1"},
      {"no grant", worker1, "", 1, 4, grpc::StatusCode::UNAUTHENTICATED, "Push: no lease grant"},
      {"forged grant", worker1, (*SessionSigner::Generate())->SignLease(lease), 1, 4, grpc::StatusCode::UNAUTHENTICATED,
       "Push: lease grant: the signature does not verify"},
      {"another worker's grant", worker1, signer->SignLease(others), 1, 4, grpc::StatusCode::PERMISSION_DENIED,
       "Push: batch 1 of lease 7 in data epoch 0 from worker 1 was not handed to it: its grant is for lease 7 in data "
       "epoch 0 to worker 0"},
      {"a batch before the grant's first", worker1, grant, 0, 4, grpc::StatusCode::PERMISSION_DENIED,
       "Push: batch 0 of lease 7 in data epoch 0 from worker 1: the lease handed it batches 1 to 2"},
      {"a batch past the lease", worker1, grant, 3, 4, grpc::StatusCode::PERMISSION_DENIED,
       "the lease handed it batches 1 to 2"},
      {"more samples than the batch", worker1, grant, 2, 3, grpc::StatusCode::INVALID_ARGUMENT,
       "Push: batch 2 of lease 7 in data epoch 0 from worker 1: num_samples is 3, the batch holds 2"},
  };
  for (const Case& c : cases) {
    grpc::Status s = push(c.session, c.grant, c.batch, c.samples);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.name;
  }
  // A lease time of its own choosing (eviction's ttl_seconds clock) is refused: it is signed.
  grpc::Status later = push(worker1, grant, 1, 4, kGranted + 86'400'000);
  EXPECT_EQ(later.error_code(), grpc::StatusCode::PERMISSION_DENIED) << later.error_message();
  EXPECT_THAT(later.error_message(),
              HasSubstr("Push: batch 1 of lease 7 in data epoch 0 from worker 1: lease_granted_unix_ms is "
                        "1800086400000, its grant says 1800000000000"));
  EXPECT_EQ(store_->step(), 0) << "a refused push was applied";
  grpc::Status good = push(worker1, grant, 2, 2);
  EXPECT_TRUE(good.ok()) << good.error_message();
  EXPECT_EQ(store_->step(), 1);
}

TEST_F(PsServiceTest, BeforeSetStoreEveryRpcIsUnavailable) {
  PullRequest pull;
  PullResponse pulled;
  grpc::Status status = stub_->Pull(Context().get(), pull, &pulled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "server not ready: waiting for the cluster view");
  PushResponse pushed;
  EXPECT_EQ(stub_->Push(Context().get(), MakePush(0, 0, 1), &pushed).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(stub_->PushPull(Context().get(), MakePush(0, 0, 1), &pulled).error_code(), grpc::StatusCode::UNAVAILABLE);
  FinishEpochResponse finished;
  EXPECT_EQ(stub_->FinishEpoch(Context().get(), FinishEpochRequest(), &finished).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(PsServiceTest, PushPullRoundTrip) {
  InstallStore();
  PullRequest pull;
  pull.set_worker_rank(0);
  pull.set_membership_epoch(1);
  PullResponse initial;
  ASSERT_TRUE(stub_->Pull(Context().get(), pull, &initial).ok());
  EXPECT_EQ(initial.step(), 0);
  EXPECT_EQ(Values(initial), std::vector<float>(8, 0.0f));

  // Worker 0's PushPull is parked on the server until worker 1 pushes; run it on its own thread.
  PullResponse after0;
  grpc::Status status0;
  std::thread worker0([&] { status0 = stub_->PushPull(Context().get(), MakePush(0, 0, 2.0f), &after0); });
  PushResponse pushed;
  grpc::Status status1 = stub_->Push(Context().get(), MakePush(1, 0, 4.0f), &pushed);
  worker0.join();
  ASSERT_TRUE(status1.ok()) << status1.error_message();
  ASSERT_TRUE(status0.ok()) << status0.error_message();
  EXPECT_EQ(store_->step(), 1);  // pushed.step() is 0 or 1, depending on which push came last
  EXPECT_EQ(after0.step(), 1);
  // Mean gradient 3, lr 0.5.
  EXPECT_EQ(Values(after0), std::vector<float>(8, -1.5f));

  pull.set_step(1);
  PullResponse pulled;
  ASSERT_TRUE(stub_->Pull(Context().get(), pull, &pulled).ok());
  EXPECT_EQ(Values(pulled), std::vector<float>(8, -1.5f));
  FinishEpochRequest finish;
  finish.set_worker_rank(1);
  FinishEpochResponse finished;
  EXPECT_TRUE(stub_->FinishEpoch(Context().get(), finish, &finished).ok());
}

TEST_F(PsServiceTest, BadInputGivesCodeAndMessage) {
  InstallStore();
  PushRequest bad = MakePush(1, 0, 1.0f);
  bad.mutable_chunks(0)->set_length(4);
  PushResponse pushed;
  grpc::Status status = stub_->Push(Context().get(), bad, &pushed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "push from worker 1 for tensor 'w' chunk at offset 0: got 4 floats, expected 8");

  PushRequest old = MakePush(0, 0, 1.0f);
  old.set_membership_epoch(0);
  status = stub_->Push(Context().get(), old, &pushed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(status.error_message(), HasSubstr("carries membership epoch 0, current is 1"));

  PullRequest far;
  far.set_worker_rank(0);
  far.set_membership_epoch(1);
  far.set_step(5);
  PullResponse pulled;
  status = stub_->Pull(Context().get(), far, &pulled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("pull from worker 0 for step 5: server 0 is at step 0"));
  EXPECT_EQ(store_->step(), 0);
}

TEST_F(PsServiceTest, ParkedPullFailsWithUnavailableOnShutdown) {
  InstallStore();
  PullRequest pull;
  pull.set_worker_rank(0);
  pull.set_membership_epoch(1);
  pull.set_step(1);
  PullResponse pulled;
  grpc::Status status;
  std::thread waiter([&] { status = stub_->Pull(Context().get(), pull, &pulled); });
  // Whether the pull is parked when the store shuts down or arrives just after, the answer is the
  // same (the store unit test covers the parked case on its own); the point here is that a parked
  // reactor is finished and the client is not left hanging.
  store_->Shutdown();
  waiter.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "server 0 shutting down");
}

TEST_F(PsServiceTest, CountersAddUpTheBytesOfEveryRequestAndAnswer) {
  InstallStore();
  TransportCounters before = service_.counters();
  EXPECT_EQ(before.Total().requests, 0);
  EXPECT_EQ(before.Total().response_bytes, 0);
  EXPECT_EQ(before.active, absl::ZeroDuration());

  PullRequest pull;
  pull.set_worker_rank(0);
  pull.set_membership_epoch(1);
  PullResponse initial;
  ASSERT_TRUE(stub_->Pull(Context().get(), pull, &initial).ok());

  // One SYNC step: worker 0's PushPull is parked until worker 1's Push arrives.
  const PushRequest push0 = MakePush(0, 0, 2.0f);
  const PushRequest push1 = MakePush(1, 0, 4.0f);
  PullResponse after0;
  grpc::Status status0;
  std::thread worker0([&] { status0 = stub_->PushPull(Context().get(), push0, &after0); });
  PushResponse pushed;
  grpc::Status status1 = stub_->Push(Context().get(), push1, &pushed);
  worker0.join();
  ASSERT_TRUE(status0.ok()) << status0.error_message();
  ASSERT_TRUE(status1.ok()) << status1.error_message();

  // A push that fails: its request counts, no answer does.
  PushRequest bad = MakePush(1, 1, 1.0f);
  bad.mutable_chunks(0)->set_length(4);
  PushResponse refused;
  EXPECT_EQ(stub_->Push(Context().get(), bad, &refused).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The raw encoding is the protobuf encoding, so the messages' own sizes are the bytes moved.
  const TransportCounters c = service_.counters();
  EXPECT_EQ(c.pull.requests, 1);
  EXPECT_EQ(c.pull.request_bytes, static_cast<int64_t>(pull.ByteSizeLong()));
  EXPECT_EQ(c.pull.responses, 1);
  EXPECT_EQ(c.pull.response_bytes, static_cast<int64_t>(initial.ByteSizeLong()));
  EXPECT_GT(c.pull.response_bytes, 8 * 4);  // the 8 weights and their chunk header
  EXPECT_EQ(c.push_pull.requests, 1);
  EXPECT_EQ(c.push_pull.request_bytes, static_cast<int64_t>(push0.ByteSizeLong()));
  EXPECT_EQ(c.push_pull.responses, 1);
  EXPECT_EQ(c.push_pull.response_bytes, static_cast<int64_t>(after0.ByteSizeLong()));
  EXPECT_GT(c.push_pull.response_bytes, 8 * 4);
  EXPECT_EQ(c.push.requests, 2);
  EXPECT_EQ(c.push.request_bytes, static_cast<int64_t>(push1.ByteSizeLong() + bad.ByteSizeLong()));
  EXPECT_EQ(c.push.responses, 1);
  EXPECT_EQ(c.push.response_bytes, static_cast<int64_t>(pushed.ByteSizeLong()));

  const TransportCounters::Method total = c.Total();
  EXPECT_EQ(total.requests, 4);
  EXPECT_EQ(total.request_bytes, c.pull.request_bytes + c.push.request_bytes + c.push_pull.request_bytes);
  EXPECT_EQ(total.responses, 3);
  EXPECT_EQ(total.response_bytes, c.pull.response_bytes + c.push.response_bytes + c.push_pull.response_bytes);
  EXPECT_GT(c.active, absl::ZeroDuration());

  // FinishEpoch carries no tensor and is not counted.
  FinishEpochRequest finish;
  finish.set_worker_rank(0);
  FinishEpochResponse finished;
  ASSERT_TRUE(stub_->FinishEpoch(Context().get(), finish, &finished).ok());
  EXPECT_EQ(service_.counters().Total().requests, 4);
}

TEST(FormatTransportCountersTest, OneParseableLine) {
  TransportCounters c;
  c.pull = {2, 100, 2, 3 * 1048576};
  c.push = {3, 2 * 1048576, 3, 30};
  c.push_pull = {5, 2 * 1048576 - 100, 4, 1048576 - 30};
  c.active = absl::Seconds(2);
  EXPECT_EQ(FormatTransportCounters(1, c),
            "server 1: received 4194304 bytes (4.0 MiB) in 10 requests, sent 4194304 bytes (4.0 MiB) in 9 "
            "responses over 2.000 s (2.0 / 2.0 MiB/s)");
  EXPECT_EQ(FormatTransportCounters(0, TransportCounters()),
            "server 0: received 0 bytes (0.0 MiB) in 0 requests, sent 0 bytes (0.0 MiB) in 0 responses over 0.000 s "
            "(0.0 / 0.0 MiB/s)");
}

}  // namespace
}  // namespace pstrain::server

namespace pstrain::server {
namespace {

// Replicas: the server of rank 0 also holds shard 1's copy (here a shard with no chunks, so its
// answers are told apart by their chunk count).
class PsServiceReplicaTest : public PsServiceTest {
 protected:
  void InstallStores() {
    auto own = ParameterStore::Create(StoreOptions());
    ASSERT_TRUE(own.ok()) << own.status();
    ParameterStore::Options replica_options = StoreOptions();
    replica_options.rank = 1;
    replica_options.write_checkpoints = false;
    auto replica = ParameterStore::Create(replica_options);
    ASSERT_TRUE(replica.ok()) << replica.status();
    store_ = std::move(own).value();
    replica_ = std::move(replica).value();
    service_.SetStores(store_.get(), replica_.get());
  }

  void TearDown() override {
    if (replica_) replica_->Shutdown();
    PsServiceTest::TearDown();
  }

  std::unique_ptr<ParameterStore> replica_;
};

TEST_F(PsServiceReplicaTest, RequestsGoToTheStoreOfTheShardTheyName) {
  InstallStores();
  PullRequest pull;
  pull.set_worker_rank(0);
  pull.set_membership_epoch(1);
  PullResponse own, mine, copy;
  ASSERT_TRUE(stub_->Pull(Context().get(), pull, &own).ok());
  EXPECT_EQ(own.chunks_size(), 1);  // no shard named: the server's own
  pull.set_shard(0);
  ASSERT_TRUE(stub_->Pull(Context().get(), pull, &mine).ok());
  EXPECT_EQ(mine.chunks_size(), 1);
  pull.set_shard(1);
  ASSERT_TRUE(stub_->Pull(Context().get(), pull, &copy).ok());
  EXPECT_EQ(copy.chunks_size(), 0);
}

TEST_F(PsServiceReplicaTest, AShardTheServerDoesNotHostIsRefused) {
  InstallStores();
  PullRequest pull;
  pull.set_worker_rank(0);
  pull.set_membership_epoch(1);
  pull.set_shard(2);
  PullResponse pulled;
  grpc::Status status = stub_->Pull(Context().get(), pull, &pulled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(), "server 0 does not host shard 2 (it hosts shards 0 and 1)");
  PushRequest push = MakePush(0, 0, 1);
  push.set_shard(2);
  PushResponse pushed;
  EXPECT_EQ(stub_->Push(Context().get(), push, &pushed).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  FinishEpochRequest finish;
  finish.set_shard(-1);
  FinishEpochResponse finished;
  EXPECT_EQ(stub_->FinishEpoch(Context().get(), finish, &finished).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(store_->step(), 0);
}

TEST_F(PsServiceReplicaTest, BackupPushAnswersOnlyOnceTheStepIsApplied) {
  InstallStores();
  auto copy_push = [](int rank) {
    PushRequest push = MakePush(rank, 0, 1);
    push.clear_chunks();  // shard 1 owns no chunk here
    push.set_shard(1);
    push.set_wait_until_applied(true);
    return push;
  };
  PushResponse first;
  grpc::Status first_status;
  std::thread worker0([&] { first_status = stub_->Push(Context().get(), copy_push(0), &first); });
  // Worker 0's answer waits for worker 1's push: the step is not applied before.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(replica_->step(), 0);
  PushResponse second;
  ASSERT_TRUE(stub_->Push(Context().get(), copy_push(1), &second).ok());
  worker0.join();
  ASSERT_TRUE(first_status.ok()) << first_status.error_message();
  EXPECT_EQ(first.step(), 1);
  EXPECT_EQ(second.step(), 1);
  EXPECT_EQ(replica_->step(), 1);
  EXPECT_EQ(store_->step(), 0);  // the server's own shard saw nothing
}

}  // namespace
}  // namespace pstrain::server
