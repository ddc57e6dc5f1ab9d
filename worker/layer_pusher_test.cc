// LayerPusher against two real parameter servers on 127.0.0.1: a part refused by one server ends
// the part parked on the other at once (no wait for the deadline), and sending the step again
// with the same request ids completes it, the part stored before being taken for a retry.
#include "worker/layer_pusher.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/ps_service.h"
#include "server/store_test_util.h"
#include "worker/ps_client.h"
#include "worker/shard_layout.h"

namespace pstrain::worker {
namespace {

using server::ParameterServerService;
using server::ParameterStore;
using namespace server::store_test;  // NOLINT: the store tests' model and helpers

// Tensor 0 "fc1.weight" (20 floats) on server 1, tensor 1 "fc1.bias" (5) on server 0: backward
// reports the bias first, so the first part goes to server 0.
ShardMap SplitMap() { return MakeShardMap({Chunk(0, 0, 20, 1), Chunk(1, 0, 5, 0)}); }

std::vector<model::ParamSpec> Params() {
  model::ParamSpec w{"fc1.weight", {4, 5}, 20, 0};
  model::ParamSpec b{"fc1.bias", {5}, 5, 20};
  return {w, b};
}

// One store behind a real gRPC server on 127.0.0.1.
struct TestServer {
  TestServer(int rank, int64_t membership_epoch) {
    ParameterStore::Options options = MakeOptions(SYNC, /*num_workers=*/2, SplitMap());
    options.rank = rank;
    options.membership_epoch = membership_epoch;
    store = MakeStore(options);
    service.SetStore(store.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~TestServer() {
    store->Shutdown();
    server->Shutdown();
  }
  std::unique_ptr<ParameterStore> store;
  ParameterServerService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// Worker 1's push of its whole gradient of step 0 to `store` (its chunk list), at epoch 5.
void PushWorker1(ParameterStore& store, const TensorChunk& chunk) {
  PushRequest req;
  req.set_worker_rank(1);
  req.set_membership_epoch(5);
  req.set_step(0);
  req.set_num_samples(2);
  req.set_request_id(7);
  *req.add_chunks() = chunk;
  ASSERT_TRUE(PushNow(store, req).ok());
}

TensorChunk GradChunk(int tensor, int64_t length) {
  TensorChunk c;
  c.set_tensor_id(tensor);
  c.set_length(length);
  c.set_data(Bytes(std::vector<float>(length, 1.0f)));
  return c;
}

TEST(LayerPusherTest, RefusedPartEndsTheStepAndTheSameIdsCompleteItLater) {
  TestServer a(/*rank=*/0, /*membership_epoch=*/5);
  TestServer b(/*rank=*/1, /*membership_epoch=*/4);  // has not learnt epoch 5 yet
  ASSERT_NE(a.port, 0);
  ASSERT_NE(b.port, 0);
  ClusterView view;
  ServerInfo* s0 = view.add_servers();
  s0->set_rank(0);
  s0->set_address(absl::StrCat("127.0.0.1:", a.port));
  ServerInfo* s1 = view.add_servers();
  s1->set_rank(1);
  s1->set_address(absl::StrCat("127.0.0.1:", b.port));
  // A long deadline: the parked part must end because it is cancelled, not because it timed out.
  absl::StatusOr<std::unique_ptr<PsClient>> ps = PsClient::Create(view, absl::Minutes(5));
  ASSERT_TRUE(ps.ok()) << ps.status();
  absl::StatusOr<ShardLayout> layout = ShardLayout::Create(SplitMap(), 2, Params());
  ASSERT_TRUE(layout.ok()) << layout.status();
  LayerPusher pusher(&*layout, ps->get(), {20, 5}, /*min_part_bytes=*/1);

  const std::vector<ShardRoute> routes = {{0, -1}, {1, -1}};
  PushRequest header;
  header.set_worker_rank(0);
  header.set_membership_epoch(5);
  header.set_step(0);
  header.set_num_samples(2);
  const std::vector<float> grad(25, 1.0f);
  std::vector<float> weights(25, -1.0f);

  // Attempt 1: the bias part parks on server 0 (worker 1 has not pushed); the weight part is
  // refused by server 1 (older epoch), which must end the parked call.
  pusher.Begin(routes, header, grad.data(), weights.data(), /*first_request_id=*/100);
  pusher.GradientReady(1, 2);
  while (!a.store->Pending(absl::Now()).has_value()) absl::SleepFor(absl::Milliseconds(1));
  pusher.GradientReady(0, 1);
  absl::Status first = pusher.Finish();
  EXPECT_TRUE(absl::IsAborted(first)) << first;

  // Attempt 2, once server 1 knows epoch 5: the same ids; server 0 takes its part for a retry.
  ASSERT_TRUE(b.store->UpdateMembership(5, {0, 1}).ok());
  pusher.Begin(routes, header, grad.data(), weights.data(), /*first_request_id=*/100);
  pusher.GradientReady(1, 2);
  pusher.GradientReady(0, 1);
  while (b.store->Pending(absl::Now()).value_or(ParameterStore::PendingStep()).missing != std::vector<int>{1}) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  PushWorker1(*a.store, GradChunk(1, 5));
  PushWorker1(*b.store, GradChunk(0, 20));
  absl::Status second = pusher.Finish();
  ASSERT_TRUE(second.ok()) << second;
  EXPECT_EQ(a.store->step(), 1);
  EXPECT_EQ(b.store->step(), 1);
  // The answers are the servers' weights after the step.
  const std::vector<float> bias = Flat(a.store->Snapshot());
  const std::vector<float> weight = Flat(b.store->Snapshot());
  EXPECT_EQ(std::vector<float>(weights.begin(), weights.begin() + 20), weight);
  EXPECT_EQ(std::vector<float>(weights.begin() + 20, weights.end()), bias);
}

}  // namespace
}  // namespace pstrain::worker
