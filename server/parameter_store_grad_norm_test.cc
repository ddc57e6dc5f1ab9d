// JobSpec.max_grad_norm_per_sample on the store: a push whose gradient norm (over this store's part,
// averaged tensors left out) is above the limit is refused with nothing changed and counted; one
// at or below it is applied as usual.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/compression.h"
#include "common/metrics.h"
#include "common/sparse_rows.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/float_ops.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server::store_test {
namespace {

using ::testing::HasSubstr;

// The norm of 25 values of 2: 10.
const std::vector<float> kNormTen(25, 2.0f);

ParameterStore::Options GuardedOptions(double limit, int workers = 2) {
  ParameterStore::Options options = MakeOptions(SYNC, workers);
  options.job.set_max_grad_norm_per_sample(limit);
  return options;
}

TEST(GradNormTest, PushAboveTheLimitIsRefusedNamingWorkerPartNormAndLimit) {
  auto store = MakeStore(GuardedOptions(9.99));
  const std::vector<float> before = Flat(store->Snapshot());
  const absl::Status status = PushNow(*store, MakePush(1, 0, 4, kNormTen));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // fc1.weight holds 20 of the 25 values: the largest part, norm sqrt(80).
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("push from worker 1 for step 0: gradient norm 10 over server 0's part (4 samples; largest "
                        "part tensor 'fc1.weight' at offset 0, norm 8.94427"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("exceeds max_grad_norm_per_sample = 9.99; nothing applied"));
  EXPECT_EQ(store->step(), 0);
  EXPECT_EQ(Flat(store->Snapshot()), before);
}

TEST(GradNormTest, PushAtTheLimitIsAppliedAndTheRefusedWorkerMayPushAgain) {
  auto store = MakeStore(GuardedOptions(10.0));
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, kNormTen)).ok());
  std::vector<float> huge(25, 0.0f);
  huge[3] = 1e18f;
  EXPECT_EQ(PushNow(*store, MakePush(1, 0, 1, huge)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->step(), 0);
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 1, kNormTen)).ok());
  EXPECT_EQ(store->step(), 1);
}

TEST(GradNormTest, OffByDefault) {
  auto store = MakeStore(MakeOptions(SYNC, 1));
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, std::vector<float>(25, 1e18f))).ok());
  EXPECT_EQ(store->step(), 1);
}

TEST(GradNormTest, AveragedTensorsCarryWeightsAndAreNotCounted) {
  ShardMap map = OneServerMap();
  map.mutable_tensors(1)->set_averaged(true);  // fc1.bias: 5 values
  ParameterStore::Options options = MakeOptions(SYNC, 1, map);
  options.job.set_max_grad_norm_per_sample(1.0);
  auto store = MakeStore(options);
  std::vector<float> push(25, 0.0f);
  for (int i = 20; i < 25; ++i) push[i] = 1000.0f;  // the averaged tensor's values: large, and fine
  push[0] = 0.5f;
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, push)).ok());
  EXPECT_EQ(store->step(), 1);
}

TEST(GradNormTest, CompressedChunksAreMeasuredDecoded) {
  auto store = MakeStore(GuardedOptions(9.0, 1));
  PushRequest req = MakePush(0, 0, 1, kNormTen);
  for (int i = 0; i < 2; ++i) {
    std::vector<uint16_t> codes;
    for (float v : Floats(req.chunks(i).data())) codes.push_back(FloatToFp16(v));
    req.mutable_chunks(i)->set_encoding(FLOAT16);
    req.mutable_chunks(i)->set_data(std::string(reinterpret_cast<const char*>(codes.data()), 2 * codes.size()));
  }
  const absl::Status status = PushNow(*store, req);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("gradient norm 10 "));
}

TEST(GradNormTest, RefusalsAreCountedInTheStoreMetrics) {
  metrics::Registry registry;
  metrics::Counter* refused = registry.AddCounter("refused", "test", {"reason"}).With({"grad_norm"});
  ParameterStore::Options options = GuardedOptions(1.0);
  options.metrics.refused_grad_norm = refused;
  auto store = MakeStore(options);
  EXPECT_FALSE(PushNow(*store, MakePush(0, 0, 1, kNormTen)).ok());
  EXPECT_FALSE(PushNow(*store, MakePush(1, 0, 1, kNormTen)).ok());
  EXPECT_EQ(refused->value(), 2);
}

TEST(GradNormTest, EmbeddingRowsCountTowardsTheNorm) {
  ParameterStore::Options options = GuardedOptions(10.0, 1);
  options.job.set_num_servers(1);  // every key on this store
  TableSpec* table = options.job.add_tables();
  table->set_name("user");
  table->set_dim(2);
  table->mutable_optimizer()->set_type(SparseOptimizerSpec::SGD);
  table->mutable_optimizer()->set_lr(0.5f);
  auto store = MakeStore(options);
  // No dense gradient; two rows of (30, 40): norm 50 * sqrt(2).
  PushRequest huge = MakePush(0, 0, 1, std::vector<float>(25, 0.0f));
  SparseRows* rows = huge.add_sparse();
  SetKeys(0, {3, 7}, rows);
  SetRows({30.0f, 40.0f, 30.0f, 40.0f}, rows);
  const absl::Status status = PushNow(*store, huge);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("gradient norm 70.7107"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("largest part the rows of table 'user', norm 70.7107"));
  EXPECT_EQ(store->step(), 0);

  PushRequest small = MakePush(0, 0, 1, std::vector<float>(25, 0.0f));
  rows = small.add_sparse();
  SetKeys(0, {3}, rows);
  SetRows({3.0f, 4.0f}, rows);
  ASSERT_TRUE(PushNow(*store, small).ok());
  EXPECT_EQ(store->step(), 1);
}

// With the guard on, the stores learn that a value is not finite from the guard's sums of squares
// instead of a pass of their own; the refusal must read as without the guard, wherever the value
// is: a gradient, an averaged tensor's weights (which the norm leaves out), an embedding row.
TEST(GradNormTest, NonFiniteValuesAreRefusedAsWithoutTheGuard) {
  ShardMap map = OneServerMap();
  map.mutable_tensors(1)->set_averaged(true);  // fc1.bias: values 20 to 24
  auto options = [&map](double limit) {
    ParameterStore::Options o = MakeOptions(SYNC, 1, map);
    o.job.set_num_servers(1);
    o.job.set_max_grad_norm_per_sample(limit);
    TableSpec* table = o.job.add_tables();
    table->set_name("user");
    table->set_dim(2);
    table->mutable_optimizer()->set_type(SparseOptimizerSpec::SGD);
    return o;
  };
  struct Case {
    int dense_index;  // -1: none
    float row_value;  // 0: finite rows
  };
  for (const Case& c :
       {Case{3, 0.0f}, Case{22, 0.0f}, Case{-1, std::nanf("")}, Case{-1, std::numeric_limits<float>::infinity()}}) {
    SCOPED_TRACE(absl::StrCat("dense index ", c.dense_index, ", row value ", c.row_value));
    std::vector<float> values(25, 0.5f);
    if (c.dense_index >= 0) values[c.dense_index] = std::nanf("");
    PushRequest push = MakePush(0, 0, 1, values);
    SparseRows* rows = push.add_sparse();
    SetKeys(0, {3, 7}, rows);
    SetRows({1.0f, 2.0f, 3.0f, c.row_value}, rows);
    auto unguarded = MakeStore(options(0));
    auto guarded = MakeStore(options(1000));
    const absl::Status want = PushNow(*unguarded, push);
    ASSERT_EQ(want.code(), absl::StatusCode::kInvalidArgument) << want;
    const absl::Status got = PushNow(*guarded, push);
    EXPECT_EQ(got, want);
    EXPECT_EQ(guarded->step(), 0);
  }
}

TEST(FloatOpsTest, ChunkSumOfSquaresReadsEveryEncodingAndSplitRuns) {
  const std::vector<float> values = {3.0f, -4.0f, 0.0f, 12.0f};  // squares sum to 169
  const std::string bytes(reinterpret_cast<const char*>(values.data()), 16);
  // Runs split inside a float.
  PayloadView split;
  split.Append(absl::string_view(bytes).substr(0, 6));
  split.Append(absl::string_view(bytes).substr(6));
  EXPECT_EQ(ChunkSumOfSquares(FLOAT32, split, 4), 169.0);
  std::vector<uint16_t> bf16;
  for (float v : values) bf16.push_back(FloatToBf16(v));
  const std::string half(reinterpret_cast<const char*>(bf16.data()), 8);
  EXPECT_EQ(ChunkSumOfSquares(BFLOAT16, PayloadView(half), 4), 169.0);
  // Top-k: indices 1 and 3 of a chunk of 6.
  const std::vector<uint32_t> indices = {1, 3};
  const std::vector<float> kept = {-4.0f, 12.0f};
  const std::string topk = std::string(reinterpret_cast<const char*>(indices.data()), 8) +
                           std::string(reinterpret_cast<const char*>(kept.data()), 8);
  EXPECT_EQ(ChunkSumOfSquares(TOPK, PayloadView(topk), 6), 160.0);
  // 1e20 squared overflows float32, not double.
  const float big[2] = {1e20f, 1e20f};
  EXPECT_TRUE(std::isfinite(SumOfSquares(big, 2)));
}

}  // namespace
}  // namespace pstrain::server::store_test
