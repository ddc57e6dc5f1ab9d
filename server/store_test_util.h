// Helpers shared by the ParameterStore tests: a two-tensor model ("fc1.weight" {4, 5}, "fc1.bias"
// {5}; 25 floats), stores over it, and pushes and pulls for it at membership epoch 4.
#ifndef PSTRAIN_SERVER_STORE_TEST_UTIL_H_
#define PSTRAIN_SERVER_STORE_TEST_UTIL_H_

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_store.h"
#include "server/test_shard_map.h"

namespace pstrain::server::store_test {

inline constexpr float kLr = 0.5f;  // a power of two keeps the hand-computed updates exact

// One server owning everything: 25 floats, fc1.weight then fc1.bias.
inline ShardMap OneServerMap() { return MakeShardMap({Chunk(0, 0, 20, 0), Chunk(1, 0, 5, 0)}); }

inline ParameterStore::Options MakeOptions(Mode mode, int num_workers, ShardMap map = OneServerMap()) {
  ParameterStore::Options options;
  options.rank = 0;
  options.job.set_mode(mode);
  options.job.set_seed(7);
  options.job.mutable_optimizer()->set_type(OptimizerSpec::SGD);
  options.job.mutable_optimizer()->mutable_schedule()->set_type(LrSchedule::CONSTANT);
  options.job.mutable_optimizer()->set_lr(kLr);
  options.shard_map = std::move(map);
  options.num_workers = num_workers;
  options.membership_epoch = 4;
  options.total_steps = 100;
  return options;
}

inline std::unique_ptr<ParameterStore> MakeStore(const ParameterStore::Options& options) {
  auto store = ParameterStore::Create(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

inline std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

inline std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), 4 * values.size());
}

// All chunks of a snapshot or response, concatenated.
inline std::vector<float> Flat(const google::protobuf::RepeatedPtrField<TensorChunk>& chunks) {
  std::vector<float> out;
  for (const TensorChunk& c : chunks) {
    std::vector<float> v = Floats(c.data());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}
inline std::vector<float> Flat(const std::vector<TensorChunk>& chunks) {
  google::protobuf::RepeatedPtrField<TensorChunk> field(chunks.begin(), chunks.end());
  return Flat(field);
}

// A push from `rank` for the one-server map whose gradient is `grad` (25 floats).
inline PushRequest MakePush(int rank, int64_t step, int64_t samples, const std::vector<float>& grad,
                            uint64_t request_id = 0) {
  PushRequest req;
  req.set_worker_rank(rank);
  req.set_membership_epoch(4);
  req.set_step(step);
  req.set_num_samples(samples);
  req.set_request_id(request_id == 0 ? 1000 * (rank + 1) + step + 1 : request_id);
  TensorChunk* w = req.add_chunks();
  w->set_tensor_id(0);
  w->set_length(20);
  w->set_data(Bytes(std::vector<float>(grad.begin(), grad.begin() + 20)));
  TensorChunk* b = req.add_chunks();
  b->set_tensor_id(1);
  b->set_length(5);
  b->set_data(Bytes(std::vector<float>(grad.begin() + 20, grad.end())));
  return req;
}

inline PullRequest MakePull(int rank, int64_t step, int32_t data_epoch = 0) {
  PullRequest req;
  req.set_worker_rank(rank);
  req.set_membership_epoch(4);
  req.set_step(step);
  req.set_data_epoch(data_epoch);
  return req;
}

// Records the outcome of a Done callback.
struct Outcome {
  std::optional<absl::Status> status;
  ParameterStore::Done done() {
    return [this](absl::Status s) {
      EXPECT_FALSE(status.has_value()) << "done called twice";
      status = std::move(s);
    };
  }
};

inline absl::Status PushNow(ParameterStore& store, const PushRequest& req, PushResponse* resp = nullptr) {
  PushResponse local;
  Outcome outcome;
  store.Push(req, resp ? resp : &local, outcome.done());
  EXPECT_TRUE(outcome.status.has_value()) << "push did not answer at once";
  return outcome.status.value_or(absl::UnknownError("no answer"));
}

inline std::vector<float> Filled(float first, float step) {
  std::vector<float> v(25);
  for (int i = 0; i < 25; ++i) v[i] = first + step * i;
  return v;
}

// On a SYNC store of 2 workers where worker 0 pushed `grad` for step 0: worker 1's `bad` push is
// refused with `code` and a message containing `message`, and changes nothing (no step, the same
// weights); worker 1's good push of `grad` then completes the step with worker 0's gradient intact.
inline void ExpectBadPushChangesNothing(const PushRequest& bad, absl::StatusCode code, const std::string& message,
                                        const std::vector<float>& grad) {
  auto store = MakeStore(MakeOptions(SYNC, 2));
  ASSERT_TRUE(PushNow(*store, MakePush(0, 0, 1, grad)).ok());
  const std::vector<float> before = Flat(store->Snapshot());
  const absl::Status status = PushNow(*store, bad);
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(message));
  EXPECT_EQ(store->step(), 0);
  EXPECT_EQ(Flat(store->Snapshot()), before);
  ASSERT_TRUE(PushNow(*store, MakePush(1, 0, 1, grad)).ok());
  EXPECT_EQ(store->step(), 1);
  const std::vector<float> after = Flat(store->Snapshot());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(after[i], before[i] - kLr * grad[i]) << i;
}

// A gradient that differs per worker, step and element, with values that do not sum exactly.
inline std::vector<float> WorkerGradient(int rank, int64_t step) {
  std::vector<float> g(25);
  for (int i = 0; i < 25; ++i) g[i] = std::sin(0.37f * i + 1.3f * rank + 0.11f * step) / (1.0f + rank);
  return g;
}

}  // namespace pstrain::server::store_test

#endif  // PSTRAIN_SERVER_STORE_TEST_UTIL_H_
