// The ShardStorage interface (server/shard_storage.h) as the ParameterStore drives it, for both
// storages: the SYNC sum of stored slots has the float order the store had before the split (dense:
// first term written, others added, a lone term applied as it is; rows: SparseSum per key in the
// order given), and each storage answers only what is asked of it.
#include <cstring>
#include <memory>
#include <vector>

#include "common/job_spec.h"
#include "common/sparse_rows.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/dense_shard.h"
#include "server/float_ops.h"
#include "server/sparse_storage.h"
#include "server/store_test_util.h"

namespace pstrain::server {
namespace {

using store_test::Flat;
using store_test::MakePush;
using store_test::OneServerMap;
using ::testing::HasSubstr;

std::unique_ptr<DenseShard> MakeDense() {
  DenseShard::Options options;
  options.job.set_seed(7);
  options.job.mutable_optimizer()->set_type(OptimizerSpec::ADAM);
  options.job.mutable_optimizer()->set_lr(0.01f);
  ApplyJobDefaults(&options.job);
  options.shard_map = OneServerMap();
  options.total_steps = 100;
  auto shard = DenseShard::Create(options);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return std::move(shard).value();
}

// Awkward values, so that a different order of the float operations shows.
std::vector<float> Gradient(float scale) {
  std::vector<float> g(25);
  for (int i = 0; i < 25; ++i) g[i] = scale * (0.1f + 1.0f / static_cast<float>(3 + i)) * ((i % 3) - 1.1f);
  return g;
}

std::vector<PayloadView> ViewsOf(const PushRequest& req) {
  std::vector<PayloadView> views;
  for (const TensorChunk& c : req.chunks()) views.emplace_back(c.data());
  return views;
}

// A worker's slot holding `grad`, as the store fills it from a push.
std::unique_ptr<GradientSlot> SlotWith(const ShardStorage& storage, const PushRequest& req) {
  const std::vector<PayloadView> views = ViewsOf(req);
  const std::vector<IncomingRows> rows = RowsOf(req.sparse());
  absl::StatusOr<std::unique_ptr<StoragePart>> part = storage.CheckGradient("push", {req, views, rows, {}}, false);
  EXPECT_TRUE(part.ok()) << part.status();
  std::unique_ptr<GradientSlot> slot = storage.NewSlot();
  storage.StoreGradient(**part, slot.get());
  return slot;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

TEST(ShardStorageTest, DenseSumIsTheFirstTermWrittenThenTheOthersAddedInTheOrderGiven) {
  const std::vector<std::vector<float>> grads = {Gradient(1.0f), Gradient(-0.37f), Gradient(2.9f)};
  const std::vector<float> weights = {0.3f, 0.45f, 0.25f};
  auto driven = MakeDense();
  std::vector<std::unique_ptr<GradientSlot>> slots;
  std::vector<WeightedSlot> terms;
  for (size_t r = 0; r < grads.size(); ++r) {
    slots.push_back(SlotWith(*driven, MakePush(static_cast<int>(r), 0, 1, grads[r])));
    terms.push_back({slots.back().get(), weights[r]});
  }
  driven->Accumulate(terms);
  driven->ApplySum(0);

  auto reference = MakeDense();
  std::vector<float> sum(25);
  Scale(weights[0], grads[0].data(), 25, sum.data());
  for (size_t r = 1; r < grads.size(); ++r) AddScaled(weights[r], grads[r].data(), 25, sum.data());
  reference->Apply(0, sum.data());
  EXPECT_TRUE(BitwiseEqual(Flat(driven->Snapshot()), Flat(reference->Snapshot())));

  // A lone term is applied as it is (weight 1).
  std::unique_ptr<GradientSlot> lone = SlotWith(*driven, MakePush(0, 1, 1, grads[1]));
  const WeightedSlot one[] = {{lone.get(), 1.0f}};
  driven->Accumulate(one);
  driven->ApplySum(1);
  reference->Apply(1, grads[1].data());
  EXPECT_TRUE(BitwiseEqual(Flat(driven->Snapshot()), Flat(reference->Snapshot())));
}

TEST(ShardStorageTest, DenseReadOfAPartAdvancesTheTargetPastItsValues) {
  auto shard = MakeDense();
  absl::StatusOr<std::unique_ptr<StoragePart>> ask = shard->CheckRead("pull", ReadAsk{1, 1, {}});
  ASSERT_TRUE(ask.ok());
  PullResponse resp;
  std::vector<float> values(25, -1.0f);
  PullAnswer target{&resp, values.data(), nullptr};
  shard->Read(**ask, &target);
  ASSERT_EQ(resp.chunks_size(), 1);
  EXPECT_EQ(resp.chunks(0).tensor_id(), 1);
  EXPECT_EQ(target.values, values.data() + 5);  // fc1.bias: 5 floats
}

JobSpec OneTableJob() {
  JobSpec job;
  job.set_seed(3);
  TableSpec* t = job.add_tables();
  t->set_name("item");
  t->set_dim(2);
  // SGD at 0.5: the update carries every bit of the summed gradient.
  t->mutable_optimizer()->set_type(SparseOptimizerSpec::SGD);
  t->mutable_optimizer()->set_lr(0.5f);
  ApplyJobDefaults(&job);
  return job;
}

std::unique_ptr<SparseStorage> MakeRows() {
  auto storage = SparseStorage::Create(OneTableJob(), 0, 1);
  EXPECT_TRUE(storage.ok()) << storage.status();
  return std::move(storage).value();
}

PushRequest RowPush(const std::vector<uint64_t>& keys, const std::vector<float>& rows) {
  PushRequest req;
  SparseRows* entry = req.add_sparse();
  SetKeys(0, keys, entry);
  SetRows(rows, entry);
  return req;
}

std::vector<float> ReadRows(const SparseStorage& storage, const std::vector<uint64_t>& keys) {
  SparseRows ask;
  SetKeys(0, keys, &ask);
  google::protobuf::RepeatedPtrField<SparseRows> list;
  *list.Add() = ask;
  const std::vector<IncomingRows> incoming = RowsOf(list);
  absl::StatusOr<std::unique_ptr<StoragePart>> part = storage.CheckRead("pull", ReadAsk{0, -1, incoming});
  EXPECT_TRUE(part.ok()) << part.status();
  PullResponse resp;
  PullAnswer target{&resp, nullptr, nullptr};
  storage.Read(**part, &target);
  EXPECT_EQ(resp.sparse_size(), 1);
  std::vector<float> out(keys.size() * 2);
  if (resp.sparse_size() == 1) CopyRows(resp.sparse(0), absl::MakeSpan(out));
  return out;
}

TEST(ShardStorageTest, RowSumMergesKeysInTheOrderGivenAndAppliesThemAscending) {
  const float wa = 0.2f, wb = 0.45f, wc = 0.35f;
  const std::vector<float> a = {0.3f, -1.7f, 2.2f, 0.9f};    // keys 1, 3
  const std::vector<float> b = {-0.6f, 1.1f, 0.45f, -2.5f};  // keys 2, 3
  const std::vector<float> c = {1.3f, 0.77f};                // key 3
  auto driven = MakeRows();
  std::unique_ptr<GradientSlot> slot_a = SlotWith(*driven, RowPush({1, 3}, a));
  std::unique_ptr<GradientSlot> slot_b = SlotWith(*driven, RowPush({2, 3}, b));
  std::unique_ptr<GradientSlot> slot_c = SlotWith(*driven, RowPush({3}, c));
  const WeightedSlot terms[] = {{slot_a.get(), wa}, {slot_b.get(), wb}, {slot_c.get(), wc}};
  driven->Accumulate(terms);
  driven->ApplySum(0);

  // The same sum by hand, as SparseSum adds: each key's row starts at zeros, terms in the order
  // given (key 3 has three, so another order would round differently).
  std::vector<float> sum(6, 0.0f);
  for (int e = 0; e < 2; ++e) {
    sum[0 + e] += wa * a[0 + e];  // key 1
    sum[4 + e] += wa * a[2 + e];  // key 3
    sum[2 + e] += wb * b[0 + e];  // key 2
    sum[4 + e] += wb * b[2 + e];  // key 3
    sum[4 + e] += wc * c[0 + e];  // key 3
  }
  auto reference = MakeRows();
  PushRequest push = RowPush({1, 2, 3}, sum);
  const std::vector<IncomingRows> rows = RowsOf(push.sparse());
  absl::StatusOr<std::unique_ptr<StoragePart>> part = reference->CheckGradient("push", {push, {}, rows, {}}, false);
  ASSERT_TRUE(part.ok()) << part.status();
  reference->ApplyGradient(0, **part);
  EXPECT_TRUE(BitwiseEqual(ReadRows(*driven, {1, 2, 3}), ReadRows(*reference, {1, 2, 3})));
}

TEST(ShardStorageTest, RowsRefuseAPartialPushThatCarriesRowsAndAnswerNothingUnasked) {
  auto storage = MakeRows();
  PushRequest push = RowPush({1}, {0.5f, 0.5f});
  push.set_partial(true);
  const std::vector<IncomingRows> rows = RowsOf(push.sparse());
  absl::StatusOr<std::unique_ptr<StoragePart>> refused = storage->CheckGradient("push", {push, {}, rows, {}}, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("rows travel with whole pushes only"));

  absl::StatusOr<std::unique_ptr<StoragePart>> none = storage->CheckRead("pull", ReadAsk{});
  ASSERT_TRUE(none.ok());
  PullResponse resp;
  OutgoingRowsAnswer answer;
  PullAnswer target{&resp, nullptr, &answer};
  storage->Read(**none, &target);
  EXPECT_TRUE(answer.entries.empty());
  EXPECT_EQ(answer.bytes.size(), 0u);
  EXPECT_EQ(resp.sparse_size(), 0);
}

}  // namespace
}  // namespace pstrain::server
