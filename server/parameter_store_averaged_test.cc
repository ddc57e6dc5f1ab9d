// Averaged tensors (TensorSpec.averaged): their chunks take plain SGD at lr 1 whatever the job's
// optimizer, so workers pushing (value pulled) - (local value) leave the sample-weighted mean of
// their values (SYNC) or the last pusher's value (ASYNC), while the other tensors follow the job's
// optimizer in the same store.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/job_spec.h"
#include "model/optimizer.h"
#include "server/model_convert.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server::store_test {
namespace {

// The two-tensor model of store_test_util.h with fc1.bias (elements 20..24) averaged.
ShardMap AveragedBiasMap() {
  ShardMap map = OneServerMap();
  map.mutable_tensors(1)->set_averaged(true);
  return map;
}

// Adam with weight decay and a warm-up, none of which may touch the averaged tensor. Initial
// values: fc1.weight element i is i / 8, fc1.bias element j is 2 + j.
ParameterStore::Options AdamOptions(Mode mode) {
  ParameterStore::Options options = MakeOptions(mode, 2, AveragedBiasMap());
  OptimizerSpec* opt = options.job.mutable_optimizer();
  opt->set_type(OptimizerSpec::ADAM);
  opt->set_lr(0.01f);
  opt->set_weight_decay(0.5f);
  opt->mutable_schedule()->set_warmup_steps(4);
  auto values = std::make_shared<std::vector<float>>(25);
  for (int i = 0; i < 20; ++i) (*values)[i] = i / 8.0f;
  for (int j = 0; j < 5; ++j) (*values)[20 + j] = 2.0f + j;
  options.initial_values = values;
  return options;
}

// Worker `rank`'s push for `step`: `weight_grad` for fc1.weight and pulled - local for fc1.bias.
PushRequest AveragingPush(int rank, int64_t step, int64_t samples, const std::vector<float>& weight_grad,
                          const std::vector<float>& pulled_bias, const std::vector<float>& local_bias) {
  std::vector<float> grad = weight_grad;
  for (int j = 0; j < 5; ++j) grad.push_back(pulled_bias[j] - local_bias[j]);
  return MakePush(rank, step, samples, grad);
}

std::vector<float> Bias(const std::vector<float>& flat) { return {flat.begin() + 20, flat.end()}; }
std::vector<float> Weight(const std::vector<float>& flat) { return {flat.begin(), flat.begin() + 20}; }

TEST(ParameterStoreAveragedTest, SyncStepLeavesTheSampleWeightedMeanWhileTrainedTensorsFollowTheJobsOptimizer) {
  const ParameterStore::Options options = AdamOptions(SYNC);
  auto store = MakeStore(options);
  const std::vector<float> w0 = Flat(store->Snapshot());
  EXPECT_THAT(Bias(w0), ::testing::ElementsAre(2, 3, 4, 5, 6));

  // Worker 0 (1 sample) holds b0_j = 6 - j, worker 1 (3 samples) b1_j = 10 + 2j; both pulled w0.
  // Every value below is exact in float: 1/4 (6 - j) + 3/4 (10 + 2j) = 9 + 1.25 j.
  std::vector<float> b0, b1, mean;
  for (int j = 0; j < 5; ++j) {
    b0.push_back(6.0f - j);
    b1.push_back(10.0f + 2.0f * j);
    mean.push_back(9.0f + 1.25f * j);
  }
  const std::vector<float> g0(20, 4.0f), g1 = Weight(Filled(-2.0f, 0.25f));
  ASSERT_TRUE(PushNow(*store, AveragingPush(0, 0, 1, g0, Bias(w0), b0)).ok());
  ASSERT_TRUE(PushNow(*store, AveragingPush(1, 0, 3, g1, Bias(w0), b1)).ok());
  ASSERT_EQ(store->step(), 1);
  const std::vector<float> w1 = Flat(store->Snapshot());
  EXPECT_EQ(Bias(w1), mean);

  // fc1.weight took one step of the job's Adam (warm-up lr 0.01 / 4, weight decay) on the
  // weighted gradient 1/4 g0 + 3/4 g1 (exact), as a lone optimizer computes it.
  std::vector<float> want = Weight(w0), grad(20);
  for (int i = 0; i < 20; ++i) grad[i] = 0.25f * g0[i] + 0.75f * g1[i];
  JobSpec job = options.job;
  ApplyJobDefaults(&job);
  auto adam = model::Optimizer::Create(OptimizerOptionsFromProto(job.optimizer()), 20);
  ASSERT_TRUE(adam.ok()) << adam.status();
  const float lr = model::ScheduledLearningRate(0.01f, LrScheduleFromProto(job.optimizer().schedule()), 0, 100);
  EXPECT_FLOAT_EQ(lr, 0.0025f);
  (*adam)->Apply(0, lr, grad.data(), want.data());
  EXPECT_EQ(Weight(w1), want);

  // Next step: both pulled the mean; worker 1 alone has samples, so the value becomes its own.
  std::vector<float> b1_next = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
  ASSERT_TRUE(PushNow(*store, AveragingPush(0, 1, 0, g0, mean, b0)).ok());
  ASSERT_TRUE(PushNow(*store, AveragingPush(1, 1, 5, g1, mean, b1_next)).ok());
  EXPECT_EQ(Bias(Flat(store->Snapshot())), b1_next);
}

TEST(ParameterStoreAveragedTest, AsyncPushRightAfterAPullSetsThePushersValueSoTheLastPushWins) {
  auto store = MakeStore(AdamOptions(ASYNC));
  const std::vector<float> zeros(20, 0.0f);
  const std::vector<float> b0 = {7, 7, 7, 7, 7}, b1 = {-3, -2, -1, 0, 1};

  PullResponse pulled0;
  Outcome pull0;
  store->Pull(MakePull(0, 0), &pulled0, pull0.done());
  ASSERT_TRUE(pull0.status.has_value() && pull0.status->ok());
  ASSERT_TRUE(PushNow(*store, AveragingPush(0, 0, 1, zeros, Bias(Flat(pulled0.chunks())), b0)).ok());
  EXPECT_EQ(Bias(Flat(store->Snapshot())), b0);

  PullResponse pulled1;
  Outcome pull1;
  store->Pull(MakePull(1, 0), &pulled1, pull1.done());
  ASSERT_TRUE(pull1.status.has_value() && pull1.status->ok());
  EXPECT_EQ(Bias(Flat(pulled1.chunks())), b0);
  // The sample count does not weigh in: one push, one value.
  ASSERT_TRUE(PushNow(*store, AveragingPush(1, 0, 9, zeros, b0, b1)).ok());
  EXPECT_EQ(Bias(Flat(store->Snapshot())), b1);
  EXPECT_EQ(store->step(), 2);
}

TEST(ParameterStoreAveragedTest, AveragedChunksOfASplitTensorAreAveragedOnEveryServer) {
  // fc1.bias split over two servers, each with part of it; fc1.weight all on server 0.
  ShardMap map = MakeShardMap({Chunk(0, 0, 20, 0), Chunk(1, 0, 2, 0), Chunk(1, 2, 3, 1)});
  map.mutable_tensors(1)->set_averaged(true);
  ParameterStore::Options options = AdamOptions(SYNC);
  options.shard_map = map;
  options.rank = 1;
  auto store = MakeStore(options);
  EXPECT_THAT(Flat(store->Snapshot()), ::testing::ElementsAre(4, 5, 6));
  auto push = [&](int rank, int64_t samples, std::vector<float> local) {
    PushRequest req;
    req.set_worker_rank(rank);
    req.set_membership_epoch(4);
    req.set_num_samples(samples);
    req.set_request_id(rank + 1);
    TensorChunk* c = req.add_chunks();
    c->set_tensor_id(1);
    c->set_offset(2);
    c->set_length(3);
    for (int j = 0; j < 3; ++j) local[j] = static_cast<float>(4 + j) - local[j];
    c->set_data(Bytes(local));
    return req;
  };
  ASSERT_TRUE(PushNow(*store, push(0, 3, {1, 1, 1})).ok());
  ASSERT_TRUE(PushNow(*store, push(1, 1, {5, 9, -3})).ok());
  // 3/4 * 1 + 1/4 * b1
  EXPECT_THAT(Flat(store->Snapshot()), ::testing::ElementsAre(2.0f, 3.0f, 0.0f));
}

}  // namespace
}  // namespace pstrain::server::store_test
