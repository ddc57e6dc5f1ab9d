// The final model is assembled from the servers' own shards once every live worker is done
// (SubmitFinalShard); no worker can submit one (SubmitFinalModel), and the job finishes only once
// the model is written.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"

namespace pstrain::scheduler {
namespace {

using test_util::DoneReport;
using test_util::Hb;
using test_util::Reg;
using test_util::TinyJobOptions;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kElements = 600;  // "w" of 600 floats: several chunks on each of 2 servers

// A 2-server, 2-worker job with a final_model_path whose "file" is `written_`.
class FinalModelTest : public ::testing::Test {
 protected:
  Scheduler::Options Options(int replicas = 1, bool checkpoints = false) {
    JobSpec job;
    job.set_num_servers(2);
    job.set_num_workers(2);
    job.set_min_workers(2);
    job.set_epochs(1);
    job.set_batch_size(10);
    job.set_eval_last_epoch_only(true);
    job.set_replicas(replicas);
    if (checkpoints) {
      job.set_checkpoint_dir("ckpt");
      job.set_checkpoint_every_steps(10);
    }
    job.set_final_model_path("final.model");
    Scheduler::Options options = TinyJobOptions(job, kElements, 50, 0, 3, [this] { return now_; });
    options.write_final_model = [this](absl::string_view bytes) -> absl::Status {
      absl::Status valid = model::ParseModelFile(bytes, "the final model").status();
      if (valid.ok()) written_.emplace_back(bytes);
      return valid;
    };
    return options;
  }

  std::unique_ptr<Scheduler> Make(int replicas = 1, bool checkpoints = false) {
    auto s = Scheduler::Create(Options(replicas, checkpoints));
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE((*s)->Register(Reg(SERVER, "h:1")).ok());
    EXPECT_TRUE((*s)->Register(Reg(SERVER, "h:2")).ok());
    EXPECT_TRUE((*s)->Register(Reg(WORKER, "h:3")).ok());
    EXPECT_TRUE((*s)->Register(Reg(WORKER, "h:4")).ok());
    EXPECT_EQ((*s)->state(), RUNNING);
    for (int rank : {0, 1}) EXPECT_TRUE((*s)->Heartbeat(Hb(SERVER, rank)).ok());
    return std::move(s).value();
  }

  static void AllDone(Scheduler* s) {
    ASSERT_TRUE(s->ReportProgress(DoneReport(0)).ok());
    ASSERT_TRUE(s->ReportProgress(DoneReport(1)).ok());
  }

  // Shard `shard` as its server would send it: the shard map's chunks, element i of "w" = i / 8.
  static FinalShard Shard(const Scheduler& s, int from, int shard) {
    FinalShard out;
    out.set_server_rank(from);
    out.set_shard(shard);
    const ClusterView view = s.View();
    for (const ChunkSpec& c : view.shard_map().chunks()) {
      if (c.server_rank() != shard) continue;
      FinalShard::Chunk* chunk = out.add_chunks();
      chunk->set_tensor_id(c.tensor_id());
      chunk->set_offset(c.offset());
      chunk->set_length(c.length());
      std::vector<float> values(c.length());
      for (int64_t k = 0; k < c.length(); ++k) values[k] = static_cast<float>(c.offset() + k) / 8;
      chunk->set_data(values.data(), values.size() * sizeof(float));
    }
    return out;
  }

  static std::vector<int> Wanted(Scheduler* s, int server) {
    absl::StatusOr<HeartbeatResponse> hb = s->Heartbeat(Hb(SERVER, server));
    EXPECT_TRUE(hb.ok()) << hb.status();
    return {hb->send_final_shards().begin(), hb->send_final_shards().end()};
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::vector<std::string> written_;
};

TEST_F(FinalModelTest, AWorkersModelIsRefusedAndChangesNothing) {
  auto s = Make();
  FinalModel model;
  model.set_worker_rank(0);
  model.set_model_file("PSTRAINM...");
  absl::Status status = s->SubmitFinalModel(model);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("assembles it from the servers' shards"));
  AllDone(s.get());
  EXPECT_EQ(s->SubmitFinalModel(model).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(written_.empty());
  EXPECT_EQ(s->state(), RUNNING);  // Waiting for the shards.
}

TEST_F(FinalModelTest, TheModelIsAssembledFromEveryShardThenTheJobFinishes) {
  auto s = Make();
  EXPECT_THAT(Wanted(s.get(), 0), ElementsAre());
  AllDone(s.get());
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_THAT(Wanted(s.get(), 0), ElementsAre(0));
  EXPECT_THAT(Wanted(s.get(), 1), ElementsAre(1));
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 1, 1)).ok());
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_TRUE(written_.empty());
  EXPECT_THAT(Wanted(s.get(), 1), ElementsAre());
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 1, 1)).ok());  // a retry changes nothing
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 0, 0)).ok());
  EXPECT_EQ(s->state(), FINISHED);
  ASSERT_EQ(written_.size(), 1u);
  absl::StatusOr<model::ModelFile> file = model::ParseModelFile(written_[0], "written");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->params.size(), 1u);
  EXPECT_EQ(file->params[0].name, "w");
  EXPECT_THAT(file->params[0].shape, ElementsAre(kElements));
  ASSERT_EQ(file->values.size(), static_cast<size_t>(kElements));
  for (int i = 0; i < kElements; ++i) ASSERT_EQ(file->values[i], static_cast<float>(i) / 8) << i;
  // Late or repeated shards write nothing more.
  EXPECT_TRUE(s->SubmitFinalShard(Shard(*s, 0, 0)).ok());
  EXPECT_EQ(written_.size(), 1u);
}

TEST_F(FinalModelTest, ShardsAreRefusedBeforeEveryWorkerIsDone) {
  auto s = Make();
  ASSERT_TRUE(s->ReportProgress(DoneReport(0)).ok());
  EXPECT_THAT(Wanted(s.get(), 0), ElementsAre());
  absl::Status status = s->SubmitFinalShard(Shard(*s, 0, 0));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("final shard 0 from server 0: not asked for"));
  ASSERT_TRUE(s->ReportProgress(DoneReport(1)).ok());
  EXPECT_THAT(Wanted(s.get(), 0), ElementsAre(0));  // The early shard was not kept.
}

TEST_F(FinalModelTest, OnlyTheShardsPrimarySendsIt) {
  auto s = Make();
  AllDone(s.get());
  absl::Status status = s->SubmitFinalShard(Shard(*s, 1, 0));
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("shard 0 is served by server 0"));
  EXPECT_EQ(s->SubmitFinalShard(Shard(*s, 0, 2)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Wanted(s.get(), 0), ElementsAre(0));
}

TEST_F(FinalModelTest, AShardThatDoesNotMatchTheShardMapIsRefusedWithNothingTaken) {
  auto s = Make();
  AllDone(s.get());
  FinalShard fewer = Shard(*s, 0, 0);
  ASSERT_GE(fewer.chunks_size(), 2);
  fewer.mutable_chunks()->RemoveLast();
  absl::Status status = s->SubmitFinalShard(fewer);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("chunks, expected"));

  FinalShard moved = Shard(*s, 0, 0);
  moved.mutable_chunks(1)->set_offset(moved.chunks(1).offset() + 1);
  status = s->SubmitFinalShard(moved);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("chunk 1 is tensor 0"));

  FinalShard short_data = Shard(*s, 0, 0);
  short_data.mutable_chunks(0)->mutable_data()->resize(4);
  status = s->SubmitFinalShard(short_data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("chunk 0 of tensor 'w' holds 4 bytes, expected"));

  FinalShard nan = Shard(*s, 0, 0);
  const float bad = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.mutable_chunks(0)->mutable_data()->data() + 3 * sizeof(float), &bad, sizeof(float));
  status = s->SubmitFinalShard(nan);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'w' element 3 is nan"));

  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_THAT(Wanted(s.get(), 0), ElementsAre(0));
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 0, 0)).ok());
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 1, 1)).ok());
  EXPECT_EQ(s->state(), FINISHED);
  ASSERT_EQ(written_.size(), 1u);
}

TEST_F(FinalModelTest, DoneWorkersLeavingDoNotFailTheJob) {
  auto s = Make();  // min_workers 2
  AllDone(s.get());
  for (int rank : {0, 1}) {
    LeaveRequest leave;
    leave.set_role(WORKER);
    leave.set_rank(rank);
    ASSERT_TRUE(s->Leave(leave).ok());
  }
  EXPECT_EQ(s->state(), RUNNING);
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 0, 0)).ok());
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 1, 1)).ok());
  EXPECT_EQ(s->state(), FINISHED);
}

TEST_F(FinalModelTest, ARestartedSchedulerAsksForTheShardsAgain) {
  auto s = Make();
  AllDone(s.get());
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 0, 0)).ok());
  const SchedulerState saved = s->Snapshot();
  s.reset();
  auto restored = Scheduler::Restore(Options(), saved);
  ASSERT_TRUE(restored.ok()) << restored.status();
  Scheduler* r = restored->get();
  EXPECT_EQ(r->state(), RUNNING);
  EXPECT_THAT(Wanted(r, 0), ElementsAre(0));
  EXPECT_THAT(Wanted(r, 1), ElementsAre(1));
  ASSERT_TRUE(r->SubmitFinalShard(Shard(*r, 0, 0)).ok());
  ASSERT_TRUE(r->SubmitFinalShard(Shard(*r, 1, 1)).ok());
  EXPECT_EQ(r->state(), FINISHED);
  EXPECT_EQ(written_.size(), 1u);
}

TEST_F(FinalModelTest, WithReplicasThePromotedCopySendsADeadServersShard) {
  auto s = Make(/*replicas=*/2);
  AllDone(s.get());
  // Server 0 falls silent; server 1 holds shard 0's copy and is promoted.
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 1)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_THAT(Wanted(s.get(), 1), ElementsAre(0, 1));
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 1, 0)).ok());
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 1, 1)).ok());
  EXPECT_EQ(s->state(), FINISHED);
  EXPECT_EQ(written_.size(), 1u);
}

TEST_F(FinalModelTest, WithServerRecoveryAServerLostBeforeItsShardFailsTheJob) {
  auto s = Make(/*replicas=*/1, /*checkpoints=*/true);
  AllDone(s.get());
  ASSERT_TRUE(s->SubmitFinalShard(Shard(*s, 0, 0)).ok());
  now_ += absl::Seconds(2);
  ASSERT_TRUE(s->Heartbeat(Hb(SERVER, 0)).ok());
  now_ += absl::Milliseconds(1500);
  s->CheckHealth();
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_THAT(s->failure().message(), HasSubstr("server 1 died after the last step, before it sent its final shard"));
  EXPECT_TRUE(written_.empty());
}

TEST_F(FinalModelTest, JobsWithoutAPathTakeNoShards) {
  JobSpec job;
  job.set_num_servers(1);
  job.set_num_workers(1);
  auto plain = Scheduler::Create(TinyJobOptions(job, 8, 50, 40, 3, [this] { return now_; }));
  ASSERT_TRUE(plain.ok());
  FinalShard shard;
  EXPECT_EQ((*plain)->SubmitFinalShard(shard).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pstrain::scheduler
