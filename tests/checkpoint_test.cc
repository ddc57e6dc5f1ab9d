// Server checkpoints written during a real cluster run form a consistent cut: the files of the
// last step, put together, are exactly the model the workers ended with.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/model_file.h"
#include "server/checkpoint.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

TEST(CheckpointTest, LastConsistentCutEqualsTheFinalModel) {
  const std::string dir = MakeTempDir("checkpoints");
  absl::StatusOr<ClusterRun> run =
      LaunchCluster("checkpointed", {"--servers=2", "--workers=2", "--batch_size=32", "--epochs=1", "--max_steps=20",
                                     "--train_limit=4096", "--test_limit=500", "--optimizer=adam", "--lr=0.01",
                                     "--checkpoint_dir=" + dir, "--checkpoint_every_steps=5"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->output;

  // Every server wrote steps 5, 10, 15 and 20 and kept the two newest, and any older one the
  // scheduler's last answer could still ask for (CheckpointAck.keep_from_step lags a report).
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<int64_t> kept = server::ListCheckpointSteps(dir, rank);
    ASSERT_GE(kept.size(), 2u) << "server " << rank;
    EXPECT_EQ(std::vector<int64_t>(kept.end() - 2, kept.end()), (std::vector<int64_t>{15, 20})) << "server " << rank;
    for (size_t i = 0; i + 2 < kept.size(); ++i) EXPECT_EQ(kept[i], 5 * static_cast<int64_t>(i + 4 - kept.size()) + 5);
  }
  absl::StatusOr<int64_t> latest = server::LatestConsistentStep(dir, 2);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 20);

  absl::StatusOr<model::ModelFile> final_model = model::ReadModelFile(run->model_path);
  ASSERT_TRUE(final_model.ok()) << final_model.status();
  std::vector<float> assembled(final_model->values.size(), -12345.0f);
  int64_t covered = 0;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<server::ShardCheckpoint> ckpt = server::ReadCheckpoint(server::CheckpointPath(dir, rank, 20));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ(ckpt->step, 20);
    EXPECT_EQ(ckpt->num_state_vectors, 2);  // Adam's two moments.
    int64_t at = 0;
    for (const ChunkSpec& chunk : ckpt->chunks) {
      const int64_t base = final_model->params[chunk.tensor_id()].flat_offset + chunk.offset();
      for (int64_t i = 0; i < chunk.length(); ++i) assembled[base + i] = ckpt->weights[at + i];
      at += chunk.length();
      covered += chunk.length();
    }
  }
  EXPECT_EQ(covered, static_cast<int64_t>(final_model->values.size()));
  EXPECT_EQ(assembled, final_model->values);  // Bitwise.
}

}  // namespace
}  // namespace pstrain::testing
