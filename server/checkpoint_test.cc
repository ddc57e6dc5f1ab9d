#include "server/checkpoint.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/store_test_util.h"

namespace pstrain::server {
namespace {

using store_test::Chunk;
using store_test::MakeShardMap;
using store_test::MakeStore;
using store_test::OneServerMap;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh, empty folder per test.
std::string TestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = absl::StrCat(::testing::TempDir(), "ckpt-", getpid(), "-", info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void Touch(const std::string& path) { WriteBytes(path, "x"); }

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

ParameterStore::Options AdamOptions(Mode mode, int num_workers, ShardMap map = OneServerMap()) {
  ParameterStore::Options options;
  options.rank = 0;
  options.job.set_mode(mode);
  options.job.set_seed(7);
  options.job.mutable_optimizer()->set_type(OptimizerSpec::ADAM);
  options.job.mutable_optimizer()->set_lr(0.01f);
  options.shard_map = std::move(map);
  options.num_workers = num_workers;
  options.membership_epoch = 3;
  options.total_steps = 100;
  return options;
}

// A gradient that differs per worker, step and element, so every update matters.
std::vector<float> Gradient(int rank, int64_t step) {
  std::vector<float> g(25);
  for (int i = 0; i < 25; ++i) g[i] = std::sin(0.37f * i + 1.3f * step + 0.5f * rank);
  return g;
}

PushRequest MakePush(int rank, int64_t step, const std::vector<float>& grad) {
  PushRequest req;
  req.set_worker_rank(rank);
  req.set_membership_epoch(3);
  req.set_step(step);
  req.set_num_samples(rank + 1);
  req.set_request_id(1000 * (rank + 1) + step + 1);
  TensorChunk* w = req.add_chunks();
  w->set_tensor_id(0);
  w->set_length(20);
  w->set_data(reinterpret_cast<const char*>(grad.data()), 4 * 20);
  TensorChunk* b = req.add_chunks();
  b->set_tensor_id(1);
  b->set_length(5);
  b->set_data(reinterpret_cast<const char*>(grad.data() + 20), 4 * 5);
  return req;
}

absl::Status PushNow(ParameterStore& store, const PushRequest& req) {
  PushResponse resp;
  std::optional<absl::Status> outcome;
  store.Push(req, &resp, [&](absl::Status s) { outcome = std::move(s); });
  EXPECT_TRUE(outcome.has_value()) << "push did not answer at once";
  return outcome.value_or(absl::UnknownError("no answer"));
}

// Every worker of a SYNC store pushes step `step`.
void SyncStep(ParameterStore& store, int num_workers, int64_t step) {
  for (int r = 0; r < num_workers; ++r) {
    ASSERT_TRUE(PushNow(store, MakePush(r, step, Gradient(r, step))).ok()) << "step " << step;
  }
  ASSERT_EQ(store.step(), step + 1);
}

std::vector<float> Weights(const ParameterStore& store) {
  std::vector<float> out;
  for (const TensorChunk& c : store.Snapshot()) {
    std::vector<float> v(c.data().size() / 4);
    std::memcpy(v.data(), c.data().data(), c.data().size());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Two chunks of 3 and 2 floats, Adam-like (2 state vectors), with awkward float values.
ShardCheckpoint SampleCheckpoint() {
  ShardCheckpoint ckpt;
  ckpt.rank = 1;
  ckpt.step = 1234567890123;
  ckpt.mode = SSP;
  ckpt.membership_epoch = 42;
  ckpt.layout_fingerprint = 0xfedcba9876543210ull;
  ckpt.chunks = {Chunk(0, 10, 3, 1), Chunk(2, 0, 2, 1)};
  ckpt.num_state_vectors = 2;
  // Edge values that must survive bit for bit (NaN and Inf are refused on load: see below).
  ckpt.weights = {-0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::lowest(), 1.0f / 3.0f};
  ckpt.state = {{1.5f, -2.5f, 3.25f, 4e-30f, 5e30f}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}};
  return ckpt;
}

// Trains a store of `options` (SYNC, 2 workers, an Adam-like optimizer) for 3 steps, checkpoints
// it through a file, restores a fresh store from it and checks both take the same next step.
void ExpectRestoredStoreContinuesBitwise(const ParameterStore::Options& options) {
  constexpr int kWorkers = 2;
  auto trained = MakeStore(options);
  for (int64_t t = 0; t < 3; ++t) SyncStep(*trained, kWorkers, t);
  auto ckpt = trained->Checkpoint();
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->step, 3);
  EXPECT_EQ(ckpt->num_state_vectors, 2);  // m and v
  const std::string path = CheckpointPath(TestDir(), 0, ckpt->step);
  ASSERT_TRUE(WriteCheckpoint(path, *ckpt).ok());
  auto loaded = ReadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  auto fresh = MakeStore(options);
  ASSERT_FALSE(SameBits(Weights(*fresh), Weights(*trained)));
  ASSERT_TRUE(fresh->Restore(*loaded).ok());
  EXPECT_EQ(fresh->step(), 3);
  EXPECT_TRUE(SameBits(Weights(*fresh), Weights(*trained)));

  // Weights alone are not enough: with zeroed moments the next step differs.
  ShardCheckpoint weights_only = *loaded;
  for (std::vector<float>& s : weights_only.state) std::fill(s.begin(), s.end(), 0.0f);
  auto amnesiac = MakeStore(options);
  ASSERT_TRUE(amnesiac->Restore(weights_only).ok());

  SyncStep(*trained, kWorkers, 3);
  SyncStep(*fresh, kWorkers, 3);
  SyncStep(*amnesiac, kWorkers, 3);
  EXPECT_TRUE(SameBits(Weights(*fresh), Weights(*trained)));
  EXPECT_FALSE(SameBits(Weights(*amnesiac), Weights(*trained)));
}

TEST(CheckpointFileTest, PathIsRankAndZeroPaddedStep) {
  EXPECT_EQ(CheckpointPath("ckpts", 3, 42), "ckpts/server-3-step-0000000042.ckpt");
}

TEST(CheckpointFileTest, RoundTripKeepsEveryFieldBitExact) {
  const std::string path = CheckpointPath(TestDir(), 1, 7);
  const ShardCheckpoint want = SampleCheckpoint();
  ASSERT_TRUE(WriteCheckpoint(path, want).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)), CheckpointFileSize(want));
  EXPECT_EQ(ReadBytes(path).substr(0, 8), "PSTRAINC");

  auto got = ReadCheckpoint(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->rank, want.rank);
  EXPECT_EQ(got->step, want.step);
  EXPECT_EQ(got->mode, want.mode);
  EXPECT_EQ(got->membership_epoch, want.membership_epoch);
  EXPECT_EQ(got->layout_fingerprint, want.layout_fingerprint);
  ASSERT_EQ(got->chunks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got->chunks[i].tensor_id(), want.chunks[i].tensor_id()) << i;
    EXPECT_EQ(got->chunks[i].offset(), want.chunks[i].offset()) << i;
    EXPECT_EQ(got->chunks[i].length(), want.chunks[i].length()) << i;
  }
  EXPECT_EQ(got->num_state_vectors, 2);
  EXPECT_TRUE(SameBits(got->weights, want.weights));
  ASSERT_EQ(got->state.size(), 2u);
  EXPECT_TRUE(SameBits(got->state[0], want.state[0]));
  EXPECT_TRUE(SameBits(got->state[1], want.state[1]));
}

TEST(CheckpointFileTest, NanOrInfWithAValidChecksumIsRefusedNamingChunkAndElement) {
  const std::string path = CheckpointPath(TestDir(), 1, 7);
  ShardCheckpoint ckpt = SampleCheckpoint();
  ckpt.weights[4] = std::numeric_limits<float>::quiet_NaN();  // chunk 1 (tensor 2 at offset 0), element 1
  ASSERT_TRUE(WriteCheckpoint(path, ckpt).ok());
  auto got = ReadCheckpoint(path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr(path));
  EXPECT_THAT(got.status().message(), HasSubstr("chunk 1 (tensor id 2 at offset 0): weight element 1 is nan"));

  ckpt = SampleCheckpoint();
  ckpt.state[1][1] = -std::numeric_limits<float>::infinity();  // chunk 0 (tensor 0 at offset 10), element 11
  ASSERT_TRUE(WriteCheckpoint(path, ckpt).ok());
  got = ReadCheckpoint(path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(),
              HasSubstr("chunk 0 (tensor id 0 at offset 10): optimizer state vector 1 element 11 is -inf"));
}

TEST(CheckpointFileTest, WrittenForTheOwnerOnlyUnlessAModeIsGiven) {
  const std::string path = CheckpointPath(TestDir(), 1, 8);
  ASSERT_TRUE(WriteCheckpoint(path, SampleCheckpoint()).ok());
  EXPECT_EQ(std::filesystem::status(path).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ASSERT_TRUE(WriteCheckpoint(path, SampleCheckpoint(), 0640).ok());
  EXPECT_EQ(std::filesystem::status(path).permissions(), std::filesystem::perms::owner_read |
                                                             std::filesystem::perms::owner_write |
                                                             std::filesystem::perms::group_read);
}

TEST(CheckpointFileTest, WriteRefusesVectorsThatDisagreeWithChunks) {
  ShardCheckpoint ckpt = SampleCheckpoint();
  ckpt.state[1].pop_back();
  const absl::Status status = WriteCheckpoint(CheckpointPath(TestDir(), 1, 7), ckpt);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("state vector 1 has 4 floats, expected 5"));
}

TEST(CheckpointFileTest, CorruptedByteIsChecksumDataLoss) {
  const std::string path = CheckpointPath(TestDir(), 1, 7);
  ASSERT_TRUE(WriteCheckpoint(path, SampleCheckpoint()).ok());
  std::string bytes = ReadBytes(path);
  bytes[bytes.size() - 10] ^= 0x01;  // inside the last state vector
  WriteBytes(path, bytes);
  const auto got = ReadCheckpoint(path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr(path));
  EXPECT_THAT(got.status().message(), HasSubstr("checksum mismatch"));
}

TEST(CheckpointFileTest, TruncatedFileIsDataLoss) {
  const std::string path = CheckpointPath(TestDir(), 1, 7);
  ASSERT_TRUE(WriteCheckpoint(path, SampleCheckpoint()).ok());
  const std::string bytes = ReadBytes(path);
  for (size_t keep : {bytes.size() - 1, bytes.size() - 30, size_t{60}, size_t{20}, size_t{0}}) {
    WriteBytes(path, bytes.substr(0, keep));
    const auto got = ReadCheckpoint(path);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << keep;
    EXPECT_THAT(got.status().message(), HasSubstr("truncated")) << keep;
    EXPECT_THAT(got.status().message(), HasSubstr(path)) << keep;
  }
}

TEST(CheckpointFileTest, BadMagicIsDataLoss) {
  const std::string path = CheckpointPath(TestDir(), 1, 7);
  ASSERT_TRUE(WriteCheckpoint(path, SampleCheckpoint()).ok());
  std::string bytes = ReadBytes(path);
  bytes[7] = 'M';  // a model file's magic
  WriteBytes(path, bytes);
  const auto got = ReadCheckpoint(path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("bad magic"));
  EXPECT_THAT(got.status().message(), HasSubstr(path));
}

TEST(CheckpointFileTest, MissingFileIsNotFound) {
  const std::string path = CheckpointPath(TestDir(), 0, 1);
  const auto got = ReadCheckpoint(path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(path));
}

TEST(CheckpointFileTest, LayoutFingerprintDependsOnTensorsAndOwnChunksOnly) {
  const ShardMap split = MakeShardMap({Chunk(0, 0, 12, 0), Chunk(0, 12, 8, 1), Chunk(1, 0, 5, 1)});
  const ShardMap other_split =
      MakeShardMap({Chunk(0, 0, 12, 0), Chunk(0, 12, 4, 1), Chunk(0, 16, 4, 1), Chunk(1, 0, 5, 1)});
  EXPECT_EQ(LayoutFingerprint(split, 0), LayoutFingerprint(other_split, 0));  // rank 0's part agrees
  EXPECT_NE(LayoutFingerprint(split, 1), LayoutFingerprint(other_split, 1));
  EXPECT_NE(LayoutFingerprint(split, 0), LayoutFingerprint(split, 1));
  EXPECT_NE(LayoutFingerprint(OneServerMap(), 0),
            LayoutFingerprint(MakeShardMap({Chunk(0, 0, 20, 0), Chunk(1, 0, 5, 0)}, "fc0.weight"), 0));
}

TEST(CheckpointFileTest, LatestConsistentStepIsNewestStepEveryServerHas) {
  const std::string dir = TestDir();
  Touch(CheckpointPath(dir, 0, 4));
  Touch(CheckpointPath(dir, 0, 8));
  Touch(CheckpointPath(dir, 1, 4));
  Touch(CheckpointPath(dir, 1, 12) + ".tmp");  // an unfinished write
  Touch(absl::StrCat(dir, "/server-1-step-8.ckpt.bak"));
  Touch(CheckpointPath(dir, 2, 8));  // a server beyond num_servers
  auto step = LatestConsistentStep(dir, 2);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 4);
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(4, 8));

  step = LatestConsistentStep(dir, 4);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestConsistentStep(dir + "/missing", 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestConsistentStep(dir, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StoreCheckpointTest, RestoredStoreMatchesBitwiseAndTakesTheSameNextStep) {
  // Adam, and AdamW whose decoupled decay keeps the same two moments.
  for (OptimizerSpec::Type type : {OptimizerSpec::ADAM, OptimizerSpec::ADAMW}) {
    SCOPED_TRACE(OptimizerSpec::Type_Name(type));
    ParameterStore::Options options = AdamOptions(SYNC, 2);
    options.job.mutable_optimizer()->set_type(type);
    if (type == OptimizerSpec::ADAMW) options.job.mutable_optimizer()->set_weight_decay(0.1f);
    ExpectRestoredStoreContinuesBitwise(options);
  }
}

TEST(StoreCheckpointTest, AStoreWithAnAveragedTensorRestoresBitwise) {
  // fc1.bias averaged (plain SGD, no state), fc1.weight trained with Adam.
  ShardMap map = OneServerMap();
  map.mutable_tensors(1)->set_averaged(true);
  const ParameterStore::Options options = AdamOptions(SYNC, 2, map);
  ExpectRestoredStoreContinuesBitwise(options);

  auto store = MakeStore(options);
  SyncStep(*store, 2, 0);
  auto ckpt = store->Checkpoint();
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_EQ(ckpt->num_state_vectors, 2);
  for (const std::vector<float>& state : ckpt->state) {
    EXPECT_NE(state[0], 0.0f);  // Adam's moments of fc1.weight
    EXPECT_THAT(std::vector<float>(state.begin() + 20, state.end()), ElementsAre(0, 0, 0, 0, 0));
  }
  // The same tensors with fc1.bias trained are another layout: neither restores the other's.
  auto trained = MakeStore(AdamOptions(SYNC, 2));
  absl::Status status = trained->Restore(*ckpt);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("fingerprint"));
  EXPECT_NE(LayoutFingerprint(map, 0), LayoutFingerprint(OneServerMap(), 0));
}

TEST(StoreCheckpointTest, RestoreRefusesAnotherServerOrLayoutAndChangesNothing) {
  auto store = MakeStore(AdamOptions(SYNC, 1));
  SyncStep(*store, 1, 0);
  const std::vector<float> before = Weights(*store);
  auto good = store->Checkpoint();
  ASSERT_TRUE(good.ok());
  good->step = 9;
  std::fill(good->weights.begin(), good->weights.end(), 1.0f);

  ShardCheckpoint wrong_rank = *good;
  wrong_rank.rank = 1;
  absl::Status status = store->Restore(wrong_rank);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("server 1's"));

  // Another split of the same model: rank 0 owns only part of fc1.weight.
  const ShardMap split = MakeShardMap({Chunk(0, 0, 12, 0), Chunk(0, 12, 8, 1), Chunk(1, 0, 5, 1)});
  ParameterStore::Options split_options = AdamOptions(SYNC, 1, split);
  auto split_store = MakeStore(split_options);
  auto wrong_layout = split_store->Checkpoint();
  ASSERT_TRUE(wrong_layout.ok());
  status = store->Restore(*wrong_layout);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("1 chunks, this server owns 2"));

  // Same chunks, another model (a renamed tensor): only the fingerprint tells.
  ShardCheckpoint renamed = *good;
  renamed.layout_fingerprint =
      LayoutFingerprint(MakeShardMap({Chunk(0, 0, 20, 0), Chunk(1, 0, 5, 0)}, "fc0.weight"), 0);
  status = store->Restore(renamed);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("fingerprint"));

  ShardCheckpoint sgd_state = *good;
  sgd_state.num_state_vectors = 0;
  sgd_state.state.clear();
  status = store->Restore(sgd_state);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("optimizer has 2"));

  ShardCheckpoint short_weights = *good;
  short_weights.weights.pop_back();
  EXPECT_EQ(store->Restore(short_weights).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(store->step(), 1);
  EXPECT_TRUE(SameBits(Weights(*store), before));
  ASSERT_TRUE(store->Restore(*good).ok());  // the test's checkpoint itself was fine
  EXPECT_EQ(store->step(), 9);
  EXPECT_EQ(Weights(*store), std::vector<float>(25, 1.0f));
}

TEST(StoreCheckpointTest, RestoreRefusedWhileASyncPushIsPending) {
  auto store = MakeStore(AdamOptions(SYNC, 2));
  auto ckpt = store->Checkpoint();
  ASSERT_TRUE(ckpt.ok());
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, Gradient(0, 0))).ok());
  const absl::Status status = store->Restore(*ckpt);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("1 of 2 workers already pushed step 0"));
}

TEST(StoreCheckpointTest, SyncStoreCheckpointsEveryNStepsAndKeepsTwo) {
  const std::string dir = TestDir() + "/made-by-the-store";
  ParameterStore::Options options = AdamOptions(SYNC, 1);
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_steps(2);
  auto store = MakeStore(options);

  SyncStep(*store, 1, 0);
  EXPECT_TRUE(ListCheckpointSteps(dir, 0).empty());
  SyncStep(*store, 1, 1);
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(2));
  for (int64_t t = 2; t < 6; ++t) SyncStep(*store, 1, t);
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(4, 6));

  // The newest file holds exactly the state at step 6.
  auto now = store->Checkpoint();
  ASSERT_TRUE(now.ok());
  auto file = ReadCheckpoint(CheckpointPath(dir, 0, 6));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->step, 6);
  EXPECT_EQ(file->mode, SYNC);
  EXPECT_EQ(file->membership_epoch, 3);
  EXPECT_EQ(file->layout_fingerprint, LayoutFingerprint(OneServerMap(), 0));
  EXPECT_TRUE(SameBits(file->weights, now->weights));
  ASSERT_EQ(file->state.size(), 2u);
  EXPECT_TRUE(SameBits(file->state[0], now->state[0]));
  EXPECT_TRUE(SameBits(file->state[1], now->state[1]));

  SyncStep(*store, 1, 6);
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(4, 6));
}

TEST(StoreCheckpointTest, AsyncStoreCheckpointsEveryNUpdates) {
  const std::string dir = TestDir();
  ParameterStore::Options options = AdamOptions(ASYNC, 2);
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_steps(3);
  auto store = MakeStore(options);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(PushNow(*store, MakePush(i % 2, i, Gradient(i % 2, i))).ok());
  EXPECT_EQ(store->step(), 7);
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(3, 6));
}

TEST(StoreCheckpointTest, SyncStoreCheckpointsTheStepAPushAskedFor) {
  // checkpoint_every_seconds in SYNC: the server has no clock of its own in the decision; the step
  // whose pushes carry `checkpoint` is the one checkpointed, on every server alike.
  const std::string dir = TestDir();
  ParameterStore::Options options = AdamOptions(SYNC, 2);
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_seconds(3600);
  auto store = MakeStore(options);
  SyncStep(*store, 2, 0);
  EXPECT_TRUE(ListCheckpointSteps(dir, 0).empty());
  PushRequest asking = MakePush(0, 1, Gradient(0, 1));
  asking.set_checkpoint(true);
  ASSERT_TRUE(PushNow(*store, asking).ok());
  ASSERT_TRUE(PushNow(*store, MakePush(1, 1, Gradient(1, 1))).ok());
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(2));
  SyncStep(*store, 2, 2);  // the request does not carry over to the next step
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(2));
}

TEST(StoreCheckpointTest, AbortedStepForgetsItsCheckpointRequest) {
  const std::string dir = TestDir();
  ParameterStore::Options options = AdamOptions(SYNC, 2);
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_seconds(3600);
  auto store = MakeStore(options);
  PushRequest asking = MakePush(0, 0, Gradient(0, 0));
  asking.set_checkpoint(true);
  ASSERT_TRUE(PushNow(*store, asking).ok());
  // Worker 1 dies: the stored push (and its request) is dropped; worker 0 recomputes without one.
  ASSERT_TRUE(store->UpdateMembership(4, {0}).ok());
  PushRequest again = MakePush(0, 0, Gradient(0, 0));
  again.set_membership_epoch(4);
  again.set_request_id(again.request_id() + 1);
  ASSERT_TRUE(PushNow(*store, again).ok());
  EXPECT_EQ(store->step(), 1);
  EXPECT_TRUE(ListCheckpointSteps(dir, 0).empty());
}

TEST(StoreCheckpointTest, AsyncStoreCheckpointsByItsOwnClock) {
  const std::string dir = TestDir();
  ParameterStore::Options options = AdamOptions(ASYNC, 1);
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_seconds(0.05);
  auto store = MakeStore(options);
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, Gradient(0, 0))).ok());
  // Whether update 1 came 50 ms after creation depends on the machine; update 2 surely does.
  absl::SleepFor(absl::Milliseconds(60));
  ASSERT_TRUE(PushNow(*store, MakePush(0, 1, Gradient(0, 1))).ok());
  const std::vector<int64_t> steps = ListCheckpointSteps(dir, 0);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back(), 2);
}

TEST(StoreCheckpointTest, FailedWriteDoesNotFailThePush) {
  const std::string dir = TestDir();
  Touch(dir + "/a-file");
  ParameterStore::Options options = AdamOptions(SYNC, 1);
  options.job.set_checkpoint_dir(dir + "/a-file/below");  // cannot be a folder
  options.job.set_checkpoint_every_steps(1);
  auto store = MakeStore(options);
  SyncStep(*store, 1, 0);
  SyncStep(*store, 1, 1);
  EXPECT_EQ(store->step(), 2);
}

// ---------------------------------------------------------------------------------------------
// Server recovery: RestoreAndUpdateMembership.

PushRequest AtEpoch(PushRequest req, int64_t epoch) {
  req.set_membership_epoch(epoch);
  return req;
}

// Every worker in `ranks` pushes step `step` at membership epoch `epoch`.
void SyncStepAt(ParameterStore& store, const std::vector<int>& ranks, int64_t step, int64_t epoch) {
  for (int r : ranks) {
    ASSERT_TRUE(PushNow(store, AtEpoch(MakePush(r, step, Gradient(r, step)), epoch)).ok()) << "step " << step;
  }
  ASSERT_EQ(store.step(), step + 1);
}

ParameterStore::Options CheckpointingOptions(const std::string& dir, int every) {
  ParameterStore::Options options = AdamOptions(SYNC, 2);
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_steps(every);
  return options;
}

TEST(StoreRecoveryTest, RollbackToCheckpointRestoresEverythingAndRedoesTheSameSteps) {
  const std::string dir = TestDir();
  std::vector<int64_t> written;
  ParameterStore::Options options = CheckpointingOptions(dir, 2);
  options.on_checkpoint_written = [&](int64_t step) { written.push_back(step); };
  auto store = MakeStore(options);
  for (int64_t t = 0; t < 6; ++t) SyncStep(*store, 2, t);
  EXPECT_THAT(written, ElementsAre(2, 4, 6));
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(4, 6));
  // Step 6 half pushed when the recovery arrives.
  ASSERT_TRUE(PushNow(*store, MakePush(0, 6, Gradient(0, 6))).ok());

  // A run that never went past step 4 (no checkpoints, so its files do not interfere).
  auto reference = MakeStore(AdamOptions(SYNC, 2));
  for (int64_t t = 0; t < 4; ++t) SyncStep(*reference, 2, t);

  auto ckpt = ReadCheckpoint(CheckpointPath(dir, 0, 4));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_TRUE(store->RestoreAndUpdateMembership(&*ckpt, 5, {1, 0}).ok());
  EXPECT_EQ(store->step(), 4);
  EXPECT_EQ(store->membership_epoch(), 5);
  EXPECT_TRUE(SameBits(Weights(*store), Weights(*reference)));
  auto now = store->Checkpoint();
  auto want = reference->Checkpoint();
  ASSERT_TRUE(now.ok() && want.ok());
  ASSERT_EQ(now->state.size(), 2u);
  EXPECT_TRUE(SameBits(now->state[0], want->state[0]));  // Adam m
  EXPECT_TRUE(SameBits(now->state[1], want->state[1]));  // Adam v
  // The abandoned run's step-6 file is gone; step 4 stays.
  EXPECT_THAT(ListCheckpointSteps(dir, 0), ElementsAre(4));

  // Old-epoch pushes are refused; the redone steps match the reference bit for bit, and the
  // checkpoint of step 6 is written again from the new run.
  EXPECT_EQ(PushNow(*store, MakePush(1, 4, Gradient(1, 4))).code(), absl::StatusCode::kAborted);
  for (int64_t t = 4; t < 6; ++t) {
    SyncStepAt(*store, {0, 1}, t, 5);
    SyncStep(*reference, 2, t);
  }
  EXPECT_TRUE(SameBits(Weights(*store), Weights(*reference)));
  EXPECT_THAT(written, ElementsAre(2, 4, 6, 6));
  auto file = ReadCheckpoint(CheckpointPath(dir, 0, 6));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(SameBits(file->weights, Weights(*reference)));
  EXPECT_EQ(file->membership_epoch, 5);
}

TEST(StoreRecoveryTest, RollbackToStepZeroRestoresTheDeclaredInitialValues) {
  const std::string dir = TestDir();
  ParameterStore::Options options = CheckpointingOptions(dir, 2);
  auto declared = std::make_shared<std::vector<float>>(25);
  for (int i = 0; i < 25; ++i) (*declared)[i] = 0.125f * i - 1.0f;
  options.initial_values = declared;
  auto store = MakeStore(options);
  ASSERT_TRUE(SameBits(Weights(*store), *declared));
  for (int64_t t = 0; t < 3; ++t) SyncStep(*store, 2, t);
  ASSERT_FALSE(SameBits(Weights(*store), *declared));
  ASSERT_TRUE(store->RestoreAndUpdateMembership(nullptr, 4, {0, 1}).ok());
  EXPECT_EQ(store->step(), 0);
  EXPECT_TRUE(SameBits(Weights(*store), *declared));
}

TEST(StoreRecoveryTest, RollbackToStepZeroRestoresTheInitialState) {
  const std::string dir = TestDir();
  auto store = MakeStore(CheckpointingOptions(dir, 2));
  auto fresh = MakeStore(AdamOptions(SYNC, 2));
  const std::vector<float> initial = Weights(*fresh);
  for (int64_t t = 0; t < 3; ++t) SyncStep(*store, 2, t);
  ASSERT_FALSE(SameBits(Weights(*store), initial));

  ASSERT_TRUE(store->RestoreAndUpdateMembership(nullptr, 4, {0, 1}).ok());
  EXPECT_EQ(store->step(), 0);
  EXPECT_TRUE(SameBits(Weights(*store), initial));
  EXPECT_TRUE(ListCheckpointSteps(dir, 0).empty());  // step 2 belonged to the abandoned run
  auto state = store->Checkpoint();
  ASSERT_TRUE(state.ok());
  for (const std::vector<float>& v : state->state) EXPECT_EQ(v, std::vector<float>(25, 0.0f));

  // The first step after the rollback equals a fresh store's first step.
  SyncStepAt(*store, {0, 1}, 0, 4);
  SyncStep(*fresh, 2, 0);
  EXPECT_TRUE(SameBits(Weights(*store), Weights(*fresh)));
}

TEST(StoreRecoveryTest, PendingStepIsDroppedAndParkedCallsAborted) {
  auto store = MakeStore(CheckpointingOptions(TestDir(), 10));
  SyncStep(*store, 2, 0);
  auto ckpt = store->Checkpoint();  // step 1
  ASSERT_TRUE(ckpt.ok());
  SyncStep(*store, 2, 1);

  // Worker 0 pushed step 2 and waits in PushPull; worker 1 waits in a pull for step 3.
  PullResponse pushpull_resp, pull_resp;
  std::optional<absl::Status> pushpull, pull;
  store->PushPull(MakePush(0, 2, std::vector<float>(25, 1000.0f)), &pushpull_resp,
                  [&](absl::Status s) { pushpull = std::move(s); });
  PullRequest pull_req;
  pull_req.set_worker_rank(1);
  pull_req.set_membership_epoch(3);
  pull_req.set_step(3);
  store->Pull(pull_req, &pull_resp, [&](absl::Status s) { pull = std::move(s); });
  ASSERT_FALSE(pushpull.has_value());
  ASSERT_FALSE(pull.has_value());

  // Plain Restore refuses while the step is pending; the recovery drops it instead.
  EXPECT_EQ(store->Restore(*ckpt).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->RestoreAndUpdateMembership(&*ckpt, 4, {0, 1}).ok());
  for (const std::optional<absl::Status>* o : {&pushpull, &pull}) {
    ASSERT_TRUE(o->has_value());
    EXPECT_EQ((*o)->code(), absl::StatusCode::kAborted);
    EXPECT_EQ((*o)->message(), "server 0 rolled back to step 1 at membership epoch 4; step 2 is void");
  }
  EXPECT_EQ(store->step(), 1);
  EXPECT_TRUE(SameBits(Weights(*store), ckpt->weights));

  // Step 1 is redone from both new pushes only (the dropped 1000s are not mixed in).
  auto reference = MakeStore(AdamOptions(SYNC, 2));
  for (int64_t t = 0; t < 2; ++t) SyncStep(*reference, 2, t);
  SyncStepAt(*store, {0, 1}, 1, 4);
  EXPECT_TRUE(SameBits(Weights(*store), Weights(*reference)));
}

TEST(StoreRecoveryTest, NewStoreRollsBackAtItsOwnEpochAndLiveSetChanges) {
  const std::string dir = TestDir();
  auto trained = MakeStore(CheckpointingOptions(dir, 2));
  for (int64_t t = 0; t < 2; ++t) SyncStep(*trained, 2, t);
  auto ckpt = ReadCheckpoint(CheckpointPath(dir, 0, 2));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();

  // A replacement server is created at the epoch of the view that asks for the rollback.
  auto replacement = MakeStore(CheckpointingOptions(dir, 2));
  ASSERT_TRUE(replacement->RestoreAndUpdateMembership(&*ckpt, 3, {1}).ok());
  EXPECT_EQ(replacement->step(), 2);
  EXPECT_EQ(replacement->membership_epoch(), 3);
  EXPECT_TRUE(SameBits(Weights(*replacement), Weights(*trained)));
  EXPECT_EQ(PushNow(*replacement, MakePush(0, 2, Gradient(0, 2))).code(), absl::StatusCode::kAborted);  // left
  SyncStepAt(*replacement, {1}, 2, 3);
}

// Pull(step) from `rank`; `*outcome` is set when it is answered (at once, or when released). Both
// pointers must outlive the call's answer.
void StartPull(ParameterStore& store, int rank, int64_t step, PullResponse* resp,
               std::optional<absl::Status>* outcome) {
  PullRequest req;
  req.set_worker_rank(rank);
  req.set_membership_epoch(3);
  req.set_step(step);
  store.Pull(req, resp, [outcome](absl::Status s) { *outcome = std::move(s); });
}

TEST(StoreRecoveryTest, SspReplacementLearnsClocksFromPushesAndUnknownOnesHoldNobodyBack) {
  // An async replacement server restores its shard but not the workers' clocks: a worker that has
  // not pushed to it yet must not hold the others back (they may be waiting on it elsewhere).
  ParameterStore::Options options = AdamOptions(SSP, 2);
  options.job.set_staleness(2);
  options.job.set_checkpoint_dir(TestDir());
  options.job.set_checkpoint_every_steps(1000);
  auto store = MakeStore(options);
  ASSERT_TRUE(store->RestoreAndUpdateMembership(nullptr, 3, {0, 1}).ok());
  ASSERT_TRUE(PushNow(*store, MakePush(0, 40, Gradient(0, 40))).ok());  // worker 0's clock is 41
  PullResponse resp, parked_resp;
  std::optional<absl::Status> pulled, parked;
  StartPull(*store, 0, 41, &resp, &pulled);
  ASSERT_TRUE(pulled.has_value()) << "an unknown clock held the pull back";
  EXPECT_TRUE(pulled->ok());
  ASSERT_TRUE(PushNow(*store, MakePush(1, 10, Gradient(1, 10))).ok());  // worker 1's clock is 11
  StartPull(*store, 0, 42, &parked_resp, &parked);
  EXPECT_FALSE(parked.has_value());  // 11 < 42 - 2: parked until worker 1 catches up
  store->Shutdown();
  EXPECT_TRUE(parked.has_value());
}

TEST(StoreRecoveryTest, RefusedRollbacksChangeNothing) {
  auto plain = MakeStore(AdamOptions(SYNC, 2));  // no checkpoints: no initial state kept
  SyncStep(*plain, 2, 0);
  const std::vector<float> before = Weights(*plain);
  absl::Status status = plain->RestoreAndUpdateMembership(nullptr, 4, {0, 1});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("none was kept"));

  auto store = MakeStore(CheckpointingOptions(TestDir(), 5));
  SyncStep(*store, 2, 0);
  auto ckpt = store->Checkpoint();
  ASSERT_TRUE(ckpt.ok());
  SyncStep(*store, 2, 1);
  const std::vector<float> at2 = Weights(*store);
  status = store->RestoreAndUpdateMembership(&*ckpt, 2, {0, 1});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the store is at epoch 3 already"));
  EXPECT_EQ(store->RestoreAndUpdateMembership(&*ckpt, 4, {0, 0}).code(), absl::StatusCode::kInvalidArgument);
  ShardCheckpoint other = *ckpt;
  other.rank = 1;
  EXPECT_EQ(store->RestoreAndUpdateMembership(&other, 4, {0, 1}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->step(), 2);
  EXPECT_EQ(store->membership_epoch(), 3);
  EXPECT_TRUE(SameBits(Weights(*store), at2));
  EXPECT_TRUE(SameBits(Weights(*plain), before));
}

}  // namespace
}  // namespace pstrain::server
