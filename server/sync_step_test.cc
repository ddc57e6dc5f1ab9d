// SyncStep (server/sync_step.h) on its own, over a storage that records what it is asked to do:
// which gradients a step sums, with which weights, in which order, and what a push of the wrong
// step, a retry or an overlapping part does. The float work itself is the storages' (their tests
// and the store's).
#include "server/sync_step.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A gradient part: the value the push brings to each of the storage's parts it covers.
struct FakeGradient : StoragePart {
  int first = 0;
  int count = 0;
  float value = 0;
};

struct FakeSlot : GradientSlot {
  std::vector<float> parts;  // NaN: not stored
};

// Two parts; records every Accumulate (each term's first part value and weight) and ApplySum.
class RecordingStorage : public ShardStorage {
 public:
  int num_parts() const override { return 2; }
  std::string PartName(int i) const override { return absl::StrCat("part ", i); }
  int64_t num_values() const override { return 2; }
  absl::StatusOr<std::unique_ptr<StoragePart>> CheckGradient(absl::string_view, const DecodedPush&,
                                                             bool) const override {
    return std::make_unique<FakeGradient>();
  }
  void AddSquares(const StoragePart&, GradientNorm*) const override {}
  absl::StatusOr<std::unique_ptr<StoragePart>> CheckRead(absl::string_view, const ReadAsk&) const override {
    return std::make_unique<FakeGradient>();
  }
  std::unique_ptr<GradientSlot> NewSlot() const override {
    auto slot = std::make_unique<FakeSlot>();
    slot->parts.assign(2, kNone);
    return slot;
  }
  void StoreGradient(StoragePart& gradient, GradientSlot* slot) const override {
    auto& g = static_cast<FakeGradient&>(gradient);
    auto* s = static_cast<FakeSlot*>(slot);
    for (int i = g.first; i < g.first + g.count; ++i) s->parts[i] = g.value;
  }
  void ClearSlot(GradientSlot* slot) const override { static_cast<FakeSlot*>(slot)->parts.assign(2, kNone); }
  void Accumulate(absl::Span<const WeightedSlot> terms) override {
    sums.emplace_back();
    for (const WeightedSlot& t : terms) {
      const auto* s = static_cast<const FakeSlot*>(t.slot);
      sums.back().emplace_back(s->parts[0] + s->parts[1], t.weight);
    }
  }
  void ApplySum(int64_t step) override { applied_steps.push_back(step); }
  void ApplyGradient(int64_t, StoragePart&) override {}
  void Read(const StoragePart&, PullAnswer*) const override {}
  void AppendSnapshot(std::vector<TensorChunk>*) const override {}
  void AppendTableStats(std::vector<TableStats>*) const override {}
  void Save(ShardCheckpoint*) const override {}
  absl::StatusOr<std::unique_ptr<PreparedRestore>> PrepareRestore(absl::string_view,
                                                                  const ShardCheckpoint&) const override {
    return nullptr;
  }
  void Install(const ShardCheckpoint&, std::unique_ptr<PreparedRestore>) override {}

  static constexpr float kNone = -1000;
  // One entry per Accumulate: (the term's slot sum, its weight) in the order given.
  std::vector<std::vector<std::pair<float, float>>> sums;
  std::vector<int64_t> applied_steps;
};

class SyncStepTest : public ::testing::Test {
 protected:
  SyncStepTest() {
    storages_.push_back(std::make_unique<RecordingStorage>());
    recorder_ = static_cast<RecordingStorage*>(storages_[0].get());
  }

  // A push from `rank` of `step` with `samples`, bringing `value` to parts [first, first + count)
  // (count 2 from 0: a whole push).
  absl::StatusOr<SyncStep::Stored> Push(SyncStep& sync, int rank, int64_t step, int64_t samples, float value,
                                        uint64_t id, int first = 0, int count = 2) {
    PushRequest req;
    req.set_worker_rank(rank);
    req.set_step(step);
    req.set_num_samples(samples);
    req.set_request_id(id);
    if (count != 2) {
      req.set_partial(true);
      req.set_first_chunk(first);
      for (int i = 0; i < count; ++i) req.add_chunks();
    }
    StorageParts grads;
    auto g = std::make_unique<FakeGradient>();
    g->first = first;
    g->count = count;
    g->value = value;
    grads.push_back(std::move(g));
    absl::StatusOr<SyncStep::Stored> stored = sync.Push(req, step_, last_[rank], &grads);
    if (stored.ok() && *stored != SyncStep::Stored::kNothing) last_[rank] = LastPush{true, step, 0, id};
    return stored;
  }

  std::vector<std::unique_ptr<ShardStorage>> storages_;
  RecordingStorage* recorder_ = nullptr;
  int64_t step_ = 3;
  std::map<int, LastPush> last_;
};

TEST_F(SyncStepTest, SumsInAscendingRankWithSampleWeightsWhateverTheArrivalOrder) {
  SyncStep sync(0, /*global_batch=*/12, &storages_);
  sync.SetLive({1, 4, 7});
  EXPECT_EQ(*Push(sync, 7, 3, 4, 70, 1), SyncStep::Stored::kStored);
  EXPECT_EQ(*Push(sync, 1, 3, 1, 10, 2), SyncStep::Stored::kStored);
  EXPECT_THAT(sync.Pending(step_, absl::Now())->missing, ElementsAre(4));
  EXPECT_EQ(*Push(sync, 4, 3, 3, 40, 3), SyncStep::Stored::kComplete);
  const SyncStep::Applied applied = sync.Apply(step_);
  EXPECT_EQ(applied.samples, 8);
  ASSERT_EQ(recorder_->sums.size(), 1u);
  EXPECT_THAT(recorder_->sums[0], ElementsAre(Pair(20, 1.0f / 8), Pair(80, 3.0f / 8), Pair(140, 4.0f / 8)));
  EXPECT_THAT(recorder_->applied_steps, ElementsAre(3));
  EXPECT_EQ(sync.num_pushed(), 0);
  EXPECT_FALSE(sync.Pending(step_, absl::Now()).has_value());
}

TEST_F(SyncStepTest, AWorkerWithNoSamplesIsLeftOutAndAStepOfNoSamplesUpdatesNothing) {
  SyncStep sync(0, 8, &storages_);
  sync.SetLive({0, 1});
  ASSERT_TRUE(Push(sync, 0, 3, 0, 1, 1).ok());
  ASSERT_EQ(*Push(sync, 1, 3, 2, 5, 2), SyncStep::Stored::kComplete);
  sync.Apply(step_);
  EXPECT_THAT(recorder_->sums[0], ElementsAre(Pair(10, 1.0f)));

  ++step_;
  ASSERT_TRUE(Push(sync, 0, 4, 0, 1, 3).ok());
  ASSERT_EQ(*Push(sync, 1, 4, 0, 5, 4), SyncStep::Stored::kComplete);
  EXPECT_EQ(sync.Apply(step_).samples, 0);
  EXPECT_EQ(recorder_->sums.size(), 1u);  // no sum, no update
  EXPECT_THAT(recorder_->applied_steps, ElementsAre(3));
}

TEST_F(SyncStepTest, RetriesOldStepsAndPushesOfAnotherStep) {
  SyncStep sync(5, 8, &storages_);
  sync.SetLive({0, 1});
  ASSERT_TRUE(Push(sync, 0, 3, 4, 1, 11).ok());
  // The same push again: a retry; the same step under another id: refused.
  EXPECT_EQ(*Push(sync, 0, 3, 4, 1, 11), SyncStep::Stored::kNothing);
  absl::StatusOr<SyncStep::Stored> again = Push(sync, 0, 3, 4, 1, 12);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("already pushed (part of) this step with request id 11"));
  // The step before the server's: applied already, OK; older ones are stale unless a retry.
  EXPECT_EQ(*Push(sync, 1, 2, 4, 1, 13), SyncStep::Stored::kNothing);
  EXPECT_EQ(Push(sync, 1, 1, 4, 1, 14).status().code(), absl::StatusCode::kFailedPrecondition);
  last_[1] = LastPush{true, 1, 0, 9};
  EXPECT_EQ(*Push(sync, 1, 1, 4, 1, 9), SyncStep::Stored::kNothing);
  absl::StatusOr<SyncStep::Stored> future = Push(sync, 1, 4, 4, 1, 15);
  EXPECT_EQ(future.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(future.status().message(), HasSubstr("from the future: server 5 is at step 3"));
  // None of them stored anything.
  EXPECT_THAT(sync.Pending(step_, absl::Now())->missing, ElementsAre(1));
}

TEST_F(SyncStepTest, AClaimAboveTheWorkersShareIsRefused) {
  SyncStep sync(0, 9, &storages_);
  sync.SetLive({0, 1});
  absl::StatusOr<SyncStep::Stored> big = Push(sync, 0, 3, 6, 1, 1);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.status().message(), HasSubstr("num_samples is 6, expected at most 5"));
  EXPECT_FALSE(sync.Pending(step_, absl::Now()).has_value());
}

TEST_F(SyncStepTest, PartialPushesFillTheSlotPartByPart) {
  SyncStep sync(0, 8, &storages_);
  sync.SetLive({0, 1});
  ASSERT_TRUE(Push(sync, 1, 3, 4, 2, 1).ok());
  EXPECT_EQ(*Push(sync, 0, 3, 4, 3, 21, /*first=*/1, /*count=*/1), SyncStep::Stored::kStored);
  // The same part again: a retry under its id, an overlap under another.
  EXPECT_EQ(*Push(sync, 0, 3, 4, 3, 21, 1, 1), SyncStep::Stored::kNothing);
  absl::StatusOr<SyncStep::Stored> overlap = Push(sync, 0, 3, 4, 3, 22, 1, 1);
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(overlap.status().message(), HasSubstr("chunk 1 (part 1) is already stored"));
  absl::StatusOr<SyncStep::Stored> other_count = Push(sync, 0, 3, 3, 3, 23, 0, 1);
  EXPECT_THAT(other_count.status().message(), HasSubstr("but an earlier part of the step said 4"));
  EXPECT_EQ(*Push(sync, 0, 3, 4, 5, 24, 0, 1), SyncStep::Stored::kComplete);
  sync.Apply(step_);
  EXPECT_THAT(recorder_->sums[0], ElementsAre(Pair(8, 0.5f), Pair(4, 0.5f)));
}

TEST_F(SyncStepTest, DropVoidsTheStepAndSetLiveKeepsWhatLiveWorkersStored) {
  SyncStep sync(0, 8, &storages_);
  sync.SetLive({0, 1});
  ASSERT_TRUE(Push(sync, 0, 3, 4, 1, 1).ok());
  sync.SetLive({0, 1, 2});  // a joiner: worker 0's push stays
  EXPECT_EQ(sync.num_pushed(), 1);
  EXPECT_THAT(sync.Pending(step_, absl::Now())->missing, ElementsAre(1, 2));
  sync.SetLive({1, 2});  // worker 0 left: its push goes with it
  EXPECT_EQ(sync.num_pushed(), 0);
  ASSERT_TRUE(Push(sync, 1, 3, 4, 1, 2).ok());
  sync.Drop();
  EXPECT_EQ(sync.num_pushed(), 0);
  last_.clear();
  ASSERT_TRUE(Push(sync, 1, 3, 4, 6, 3).ok());
  ASSERT_EQ(*Push(sync, 2, 3, 4, 7, 4), SyncStep::Stored::kComplete);
  sync.Apply(step_);
  EXPECT_THAT(recorder_->sums[0], ElementsAre(Pair(12, 0.5f), Pair(14, 0.5f)));
}

}  // namespace
}  // namespace pstrain::server
