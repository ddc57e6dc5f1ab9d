#include "server/parameter_store.h"

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/init.h"
#include "server/model_convert.h"
#include "server/store_test_util.h"

namespace pstrain::server::store_test {
namespace {

using ::testing::HasSubstr;

TEST(ParameterStoreTest, InitialWeightsComeFromSeedAndTensorId) {
  auto store = MakeStore(MakeOptions(SYNC, 1));
  std::vector<float> got = Flat(store->Snapshot());
  ASSERT_EQ(got.size(), 25u);
  auto spec = ParamSpecFromProto(OneServerMap().tensors(0));
  ASSERT_TRUE(spec.ok());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(got[i], model::InitialValue(7, 0, i, *spec)) << i;
  for (int i = 20; i < 25; ++i) EXPECT_EQ(got[i], 0.0f) << i;
  EXPECT_EQ(store->step(), 0);
}

TEST(ParameterStoreTest, DeclaredInitialValuesReplaceTheSeededOnes) {
  // Two servers: server 1 owns the last 13 floats of fc1.weight and all of fc1.bias.
  const ShardMap map = MakeShardMap({Chunk(0, 0, 12, 0), Chunk(0, 12, 8, 1), Chunk(1, 0, 5, 1)});
  auto values = std::make_shared<std::vector<float>>(25);
  for (int i = 0; i < 25; ++i) (*values)[i] = 100.0f + i;
  ParameterStore::Options options = MakeOptions(SYNC, 1, map);
  options.rank = 1;
  options.initial_values = values;
  auto store = MakeStore(options);
  std::vector<float> expected;
  for (int i = 12; i < 25; ++i) expected.push_back(100.0f + i);
  EXPECT_EQ(Flat(store->Snapshot()), expected);
  options.rank = 0;
  EXPECT_EQ(Flat(MakeStore(options)->Snapshot()), std::vector<float>(values->begin(), values->begin() + 12));
}

TEST(ParameterStoreTest, DeclaredInitialValuesOfAnotherSizeAreRefused) {
  ParameterStore::Options options = MakeOptions(SYNC, 1);
  options.initial_values = std::make_shared<std::vector<float>>(24, 1.0f);
  absl::StatusOr<std::unique_ptr<ParameterStore>> store = ParameterStore::Create(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(),
              HasSubstr("tensor 'fc1.bias' covers [20, 25) of the flat model, but there are 24 initial values"));
  options.initial_values = std::make_shared<std::vector<float>>(26, 1.0f);
  EXPECT_THAT(ParameterStore::Create(options).status().message(),
              HasSubstr("26 initial values for a model of 25 elements (2 tensors)"));
}

TEST(ParameterStoreTest, SyncAverageIsWeightedBySamplesInRankOrder) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  // Worker 0: 1 sample, gradient 4 everywhere; worker 1: 3 samples, gradient 8 + i.
  // Mean = 1/4 * 4 + 3/4 * (8 + i) = 7 + 0.75 i; SGD with lr 0.5 moves by 3.5 + 0.375 i.
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, std::vector<float>(25, 4.0f))).ok());
  EXPECT_EQ(store->step(), 0);
  PushResponse resp;
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 3, Filled(8.0f, 1.0f)), &resp).ok());
  EXPECT_EQ(resp.step(), 1);
  EXPECT_EQ(store->step(), 1);
  const std::vector<float> w1 = Flat(store->Snapshot());
  for (int i = 0; i < 25; ++i) {
    float sum = 0.0f;
    sum += 0.25f * 4.0f;
    sum += 0.75f * (8.0f + i);
    EXPECT_EQ(sum, 7.0f + 0.75f * i);
    EXPECT_EQ(w1[i], w0[i] - kLr * sum) << "element " << i;
  }
}

TEST(ParameterStoreTest, PullParksUntilStepIsAppliedThenReturnsNewWeights) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> w0 = Flat(store->Snapshot());

  PullResponse now;
  Outcome now_outcome;
  store->Pull(MakePull(0, 0), &now, now_outcome.done());
  ASSERT_TRUE(now_outcome.status.has_value());
  ASSERT_TRUE(now_outcome.status->ok());
  EXPECT_EQ(now.step(), 0);
  EXPECT_EQ(Flat(now.chunks()), w0);
  ASSERT_EQ(now.chunks_size(), 2);
  EXPECT_EQ(now.chunks(1).tensor_id(), 1);
  EXPECT_EQ(now.chunks(1).length(), 5);

  PullResponse parked;
  Outcome parked_outcome;
  store->Pull(MakePull(1, 1), &parked, parked_outcome.done());
  EXPECT_FALSE(parked_outcome.status.has_value());
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 2, std::vector<float>(25, 2.0f))).ok());
  EXPECT_FALSE(parked_outcome.status.has_value());
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 2, std::vector<float>(25, 4.0f))).ok());
  ASSERT_TRUE(parked_outcome.status.has_value());
  ASSERT_TRUE(parked_outcome.status->ok()) << *parked_outcome.status;
  EXPECT_EQ(parked.step(), 1);
  const std::vector<float> w1 = Flat(parked.chunks());
  ASSERT_EQ(w1.size(), 25u);
  for (int i = 0; i < 25; ++i) EXPECT_EQ(w1[i], w0[i] - kLr * 3.0f) << i;
}

TEST(ParameterStoreTest, PushPullAnswersWithWeightsAfterTheStep) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  PullResponse r0, r1;
  Outcome o0, o1;
  store->PushPull(MakePush(0, 0, 1, std::vector<float>(25, 2.0f)), &r0, o0.done());
  EXPECT_FALSE(o0.status.has_value());
  store->PushPull(MakePush(1, 0, 1, std::vector<float>(25, 2.0f)), &r1, o1.done());
  ASSERT_TRUE(o0.status.has_value() && o1.status.has_value());
  ASSERT_TRUE(o0.status->ok() && o1.status->ok());
  EXPECT_EQ(r0.step(), 1);
  EXPECT_EQ(Flat(r0.chunks()), Flat(r1.chunks()));
  const std::vector<float> w1 = Flat(r0.chunks());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(w1[i], w0[i] - kLr * 2.0f) << i;
}

TEST(ParameterStoreTest, ZeroSampleWorkerCountsWithWeightZero) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 0, std::vector<float>(25, 1000.0f))).ok());
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 5, std::vector<float>(25, 2.0f))).ok());
  const std::vector<float> w1 = Flat(store->Snapshot());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(w1[i], w0[i] - kLr * 2.0f) << i;
}

TEST(ParameterStoreTest, StepWithNoSamplesAdvancesWithoutUpdate) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 0, std::vector<float>(25, 3.0f))).ok());
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 0, std::vector<float>(25, 3.0f))).ok());
  EXPECT_EQ(store->step(), 1);
  EXPECT_EQ(Flat(store->Snapshot()), w0);
}

struct BadPushCase {
  std::string name;
  std::function<void(PushRequest*)> mutate;
  absl::StatusCode code;
  std::string message;
};

TEST(ParameterStoreTest, BadPushesAreRefusedAndChangeNothing) {
  const std::vector<float> grad = Filled(1.0f, 0.5f);
  const std::vector<BadPushCase> cases = {
      {"unknown tensor", [](PushRequest* r) { r->mutable_chunks(1)->set_tensor_id(9); },
       absl::StatusCode::kInvalidArgument, "push from worker 1: unknown tensor id 9 (the model has 2 tensors)"},
      {"wrong length",
       [](PushRequest* r) {
         r->mutable_chunks(0)->set_length(10);
         r->mutable_chunks(0)->mutable_data()->resize(40);
       },
       absl::StatusCode::kInvalidArgument,
       "push from worker 1 for tensor 'fc1.weight' chunk at offset 0: got 10 floats, expected 20"},
      {"short data", [](PushRequest* r) { r->mutable_chunks(1)->mutable_data()->resize(19); },
       absl::StatusCode::kInvalidArgument,
       "push from worker 1 for tensor 'fc1.bias' chunk at offset 0: got 19 bytes of data, expected 20"},
      {"missing chunk", [](PushRequest* r) { r->mutable_chunks()->RemoveLast(); }, absl::StatusCode::kInvalidArgument,
       "push from worker 1: got 1 chunks, expected 2"},
      {"wrong offset", [](PushRequest* r) { r->mutable_chunks(1)->set_offset(2); }, absl::StatusCode::kInvalidArgument,
       "push from worker 1: chunk 1 is tensor 'fc1.bias' at offset 2, expected tensor 'fc1.bias' at offset 0"},
      {"rank not live", [](PushRequest* r) { r->set_worker_rank(2); }, absl::StatusCode::kAborted,
       "push rejected by server 0: worker 2 is not a live member at membership epoch 4"},
      {"negative rank", [](PushRequest* r) { r->set_worker_rank(-1); }, absl::StatusCode::kInvalidArgument,
       "push from worker -1: worker rank out of range"},
      {"negative samples", [](PushRequest* r) { r->set_num_samples(-3); }, absl::StatusCode::kInvalidArgument,
       "push from worker 1: num_samples is -3, expected 0 to 512 (the job's global batch)"},
      {"samples never handed out", [](PushRequest* r) { r->set_num_samples(1 << 20); },
       absl::StatusCode::kInvalidArgument,
       "push from worker 1: num_samples is 1048576, expected 0 to 512 (the job's global batch)"},
      {"more than a worker's share", [](PushRequest* r) { r->set_num_samples(300); },
       absl::StatusCode::kInvalidArgument,
       "push from worker 1 for step 0: num_samples is 300, expected at most 256 (a share of the global batch of 512 "
       "among 2 live workers)"},
      {"data epoch never handed out", [](PushRequest* r) { r->set_data_epoch(1000); },
       absl::StatusCode::kInvalidArgument,
       "push from worker 1: data_epoch is 1000, expected 0 to 9 (the job has 10 epochs)"},
      {"old membership", [](PushRequest* r) { r->set_membership_epoch(3); }, absl::StatusCode::kAborted,
       "push from worker 1 carries membership epoch 3, current is 4"},
      {"new membership", [](PushRequest* r) { r->set_membership_epoch(5); }, absl::StatusCode::kAborted,
       "server 0 is at membership epoch 4, the push carries 5; retry shortly"},
      {"nan",
       [](PushRequest* r) {
         float nan = std::numeric_limits<float>::quiet_NaN();
         std::memcpy(r->mutable_chunks(0)->mutable_data()->data() + 4 * 17, &nan, 4);
       },
       absl::StatusCode::kInvalidArgument, "push from worker 1 for tensor 'fc1.weight': element 17 is nan"},
      {"inf",
       [](PushRequest* r) {
         float inf = -std::numeric_limits<float>::infinity();
         std::memcpy(r->mutable_chunks(1)->mutable_data()->data() + 4 * 3, &inf, 4);
       },
       absl::StatusCode::kInvalidArgument, "push from worker 1 for tensor 'fc1.bias': element 3 is -inf"},
      {"future step", [](PushRequest* r) { r->set_step(7); }, absl::StatusCode::kFailedPrecondition,
       "push for step 7 from the future: server 0 is at step 0"},
  };
  for (const BadPushCase& c : cases) {
    SCOPED_TRACE(c.name);
    // Worker 0 has pushed already, so a bad push from worker 1 must not complete the step.
    PushRequest req = MakePush(1, 0, 1, grad);
    c.mutate(&req);
    ExpectBadPushChangesNothing(req, c.code, c.message, grad);
  }
}

TEST(ParameterStoreTest, StalePushAndFarPullAreRefused) {
  auto store = MakeStore(MakeOptions(SYNC, 1));
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, Filled(1, 0))).ok());
  ASSERT_TRUE(PushNow(*store, MakePush(0, 1, 1, Filled(1, 0))).ok());
  const std::vector<float> before = Flat(store->Snapshot());
  absl::Status stale = PushNow(*store, MakePush(0, 0, 1, Filled(1, 0), /*request_id=*/77));
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stale.message()), HasSubstr("push from worker 0 for step 0 is stale: server 0 is at step 2"));

  PullResponse resp;
  Outcome outcome;
  store->Pull(MakePull(0, 4), &resp, outcome.done());
  ASSERT_TRUE(outcome.status.has_value());
  EXPECT_EQ(outcome.status->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(outcome.status->message()),
              HasSubstr("pull from worker 0 for step 4: server 0 is at step 2"));

  Outcome old_epoch;
  PullRequest pull = MakePull(0, 0);
  pull.set_membership_epoch(1);
  store->Pull(pull, &resp, old_epoch.done());
  ASSERT_TRUE(old_epoch.status.has_value());
  EXPECT_EQ(old_epoch.status->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store->step(), 2);
  EXPECT_EQ(Flat(store->Snapshot()), before);
}

TEST(ParameterStoreTest, NonFiniteGradientAllowedByFlag) {
  ParameterStore::Options options = MakeOptions(SYNC, 1);
  options.job.set_allow_nonfinite_gradients(true);
  auto store = MakeStore(options);
  std::vector<float> grad(25, 1.0f);
  grad[3] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, grad)).ok());
  const std::vector<float> w = Flat(store->Snapshot());
  EXPECT_TRUE(std::isnan(w[3]));
  EXPECT_FALSE(std::isnan(w[4]));
}

TEST(ParameterStoreTest, DuplicatePushIsIdempotentAndOtherIdIsRefused) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, std::vector<float>(25, 2.0f), 11)).ok());
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, std::vector<float>(25, 2.0f), 11)).ok());
  EXPECT_EQ(store->step(), 0);
  absl::Status other = PushNow(*store, MakePush(0, 0, 1, std::vector<float>(25, 2.0f), 12));
  EXPECT_EQ(other.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(other.message()), HasSubstr("already pushed (part of) this step with request id 11"));
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 1, std::vector<float>(25, 4.0f), 21)).ok());
  EXPECT_EQ(store->step(), 1);
  const std::vector<float> w1 = Flat(store->Snapshot());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(w1[i], w0[i] - kLr * 3.0f) << i;
  // A retry after the step was applied (its answer was lost) is still OK and changes nothing.
  PushResponse resp;
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 1, std::vector<float>(25, 4.0f), 21), &resp).ok());
  EXPECT_EQ(resp.step(), 1);
  EXPECT_EQ(Flat(store->Snapshot()), w1);
}

TEST(ParameterStoreTest, AsyncAppliesEachPushAtOnce) {
  auto store = MakeStore(MakeOptions(ASYNC, 2));
  const std::vector<float> w0 = Flat(store->Snapshot());
  PushResponse resp;
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 3, std::vector<float>(25, 2.0f)), &resp).ok());
  EXPECT_EQ(resp.step(), 1);
  ASSERT_TRUE(PushNow(*store, MakePush(0, 1, 3, std::vector<float>(25, 2.0f))).ok());
  // A zero-sample push is no update.
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 0, std::vector<float>(25, 100.0f))).ok());
  EXPECT_EQ(store->step(), 2);
  PullResponse pulled;
  Outcome outcome;
  store->Pull(MakePull(1, 50), &pulled, outcome.done());
  ASSERT_TRUE(outcome.status.has_value() && outcome.status->ok());
  EXPECT_EQ(pulled.step(), 2);
  const std::vector<float> w2 = Flat(pulled.chunks());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(w2[i], (w0[i] - kLr * 2.0f) - kLr * 2.0f) << i;
}

TEST(ParameterStoreTest, SspBlocksFastWorkerUntilSlowOnePushes) {
  ParameterStore::Options options = MakeOptions(SSP, 2);
  options.job.set_staleness(1);
  auto store = MakeStore(options);
  const std::vector<float> g(25, 1.0f);
  // Worker 0 pushes twice (clock 2) and asks for the weights of its step 2: it needs every clock >= 1.
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, g)).ok());
  PullResponse resp;
  Outcome first;
  store->PushPull(MakePush(0, 1, 1, g), &resp, first.done());
  EXPECT_FALSE(first.status.has_value());
  EXPECT_EQ(store->step(), 2);
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 1, g)).ok());
  ASSERT_TRUE(first.status.has_value());
  EXPECT_TRUE(first.status->ok()) << *first.status;
  EXPECT_EQ(resp.step(), 3);

  // Clocks 2 and 1: Pull(step 3) by worker 0 needs worker 1 at 2; worker 1 finishing the epoch
  // releases it instead.
  Outcome second;
  store->Pull(MakePull(0, 3), &resp, second.done());
  EXPECT_FALSE(second.status.has_value());
  FinishEpochRequest finish;
  finish.set_worker_rank(1);
  finish.set_data_epoch(0);
  ASSERT_TRUE(store->FinishEpoch(finish).ok());
  ASSERT_TRUE(second.status.has_value());
  EXPECT_TRUE(second.status->ok()) << *second.status;

  // A new data epoch resets the clocks; an old one is refused.
  Outcome third;
  store->Pull(MakePull(1, 1, /*data_epoch=*/1), &resp, third.done());
  ASSERT_TRUE(third.status.has_value());
  EXPECT_TRUE(third.status->ok());  // every clock is 0 >= 1 - 1
  Outcome fourth;
  store->Pull(MakePull(1, 2, /*data_epoch=*/1), &resp, fourth.done());
  EXPECT_FALSE(fourth.status.has_value());
  absl::Status old = PushNow(*store, MakePush(0, 2, 1, g));
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(old.message()),
              HasSubstr("push from worker 0 for data epoch 0: server 0 is already in data epoch 1"));
  PushRequest next = MakePush(0, 0, 1, g);
  next.set_data_epoch(1);
  ASSERT_TRUE(PushNow(*store, next).ok());
  EXPECT_FALSE(fourth.status.has_value());                      // worker 1 (clock 0) holds its own pull for 2 back
  PushRequest own = MakePush(1, 0, 1, g, /*request_id=*/2099);  // ids are unique per worker
  own.set_data_epoch(1);
  ASSERT_TRUE(PushNow(*store, own).ok());
  ASSERT_TRUE(fourth.status.has_value());
  EXPECT_TRUE(fourth.status->ok());
}

TEST(ParameterStoreTest, ArrivalOrderDoesNotChangeTheResult) {
  constexpr int kWorkers = 4;
  constexpr int kSteps = 30;
  ParameterStore::Options options = MakeOptions(SYNC, kWorkers);
  options.job.mutable_optimizer()->set_type(OptimizerSpec::ADAM);
  options.job.mutable_optimizer()->set_lr(0.01f);

  // Reference: one thread, workers pushing in reverse rank order.
  auto reference = MakeStore(options);
  for (int64_t t = 0; t < kSteps; ++t) {
    for (int r = kWorkers - 1; r >= 0; --r) {
      ASSERT_TRUE(PushNow(*reference, MakePush(r, t, 1 + r, WorkerGradient(r, t))).ok());
    }
  }
  ASSERT_EQ(reference->step(), kSteps);

  // Concurrent: each worker on its own thread, PushPull waiting for the step like a real worker.
  auto store = MakeStore(options);
  std::vector<std::thread> workers;
  std::vector<absl::Status> results(kWorkers);
  for (int r = 0; r < kWorkers; ++r) {
    workers.emplace_back([&, r] {
      for (int64_t t = 0; t < kSteps; ++t) {
        PullResponse resp;
        absl::Notification answered;
        absl::Status status;
        store->PushPull(MakePush(r, t, 1 + r, WorkerGradient(r, t)), &resp, [&](absl::Status s) {
          status = std::move(s);
          answered.Notify();
        });
        answered.WaitForNotification();
        if (!status.ok() || resp.step() != t + 1) {
          results[r] = status.ok() ? absl::InternalError(absl::StrCat("step ", resp.step())) : status;
          return;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (int r = 0; r < kWorkers; ++r) EXPECT_TRUE(results[r].ok()) << "worker " << r << ": " << results[r];
  EXPECT_EQ(store->step(), kSteps);
  EXPECT_EQ(Flat(store->Snapshot()), Flat(reference->Snapshot()));
  EXPECT_NE(Flat(store->Snapshot()), Flat(MakeStore(options)->Snapshot()));
}

TEST(ParameterStoreTest, InitIsIdenticalWithOneOrThreeServers) {
  auto one = MakeStore(MakeOptions(SYNC, 1));
  const ShardMap three =
      MakeShardMap({Chunk(0, 0, 7, 0), Chunk(0, 7, 7, 1), Chunk(0, 14, 6, 2), Chunk(1, 0, 2, 2), Chunk(1, 2, 3, 2)});
  std::vector<float> joined;
  for (int rank = 0; rank < 3; ++rank) {
    ParameterStore::Options options = MakeOptions(SYNC, 1, three);
    options.rank = rank;
    auto store = MakeStore(options);
    std::vector<float> part = Flat(store->Snapshot());
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, Flat(one->Snapshot()));
}

TEST(ParameterStoreTest, ShutdownFailsParkedPulls) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  PullResponse resp;
  Outcome parked;
  store->Pull(MakePull(0, 1), &resp, parked.done());
  EXPECT_FALSE(parked.status.has_value());
  store->Shutdown();
  ASSERT_TRUE(parked.status.has_value());
  EXPECT_EQ(parked.status->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(parked.status->message(), "server 0 shutting down");
  absl::Status late = PushNow(*store, MakePush(0, 0, 1, Filled(1, 0)));
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable);
}

TEST(ParameterStoreTest, CreateRefusesInconsistentShardMap) {
  ParameterStore::Options options = MakeOptions(SYNC, 1, MakeShardMap({Chunk(0, 15, 10, 0)}));
  auto store = ParameterStore::Create(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("chunk 0 of tensor 'fc1.weight' covers [15, 25)"));

  options = MakeOptions(SYNC, 0);
  EXPECT_EQ(ParameterStore::Create(options).status().code(), absl::StatusCode::kInvalidArgument);

  options = MakeOptions(SYNC, 3);
  options.worker_ranks = {4, 1, 4};
  store = ParameterStore::Create(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("rank 4 appears twice"));
  options.worker_ranks = {0, 1};
  store = ParameterStore::Create(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("2 worker ranks for num_workers 3"));
  options.worker_ranks = {0, -2, 1};
  EXPECT_EQ(ParameterStore::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain::server::store_test
