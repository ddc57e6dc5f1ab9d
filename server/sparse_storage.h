// SparseStorage: the ShardStorage (server/shard_storage.h) of this shard's embedding-table rows, a
// SparseShard (server/sparse_shard.h) with the SYNC sum of its row gradients. It has no parts: its
// requests and answers are keyed (PushRequest.sparse, .pull_sparse, PullRequest.sparse), not laid
// out, so it refuses a partial push that carries rows.
//
//   CheckGradient   SparseShard::Check of the push's row entries (keys and rows copied once)
//   StoreGradient   the rows move into the worker's slot
//   Accumulate      SparseSum::Add of each slot in the order given (ascending rank), then
//   ApplySum        one update of the summed rows, keys ascending per table
//   ApplyGradient   ASYNC/SSP: one update of the push's rows as they came
//   Read            the rows of the asked keys (never-written keys read as their initial values)
//   ReadBeforeLastSum  the same, as they were before the last ApplySum (server/rows_before_update.h)
//   Save / Install  the serialized tables (ShardCheckpoint::tables); a delta checkpoint's Save
//                   (base_step >= 0) the rows changed since the last cut
//
// A job without tables still has one: it refuses every row entry ("this job has none").
//
// Thread safety: none (see server/shard_storage.h).
#ifndef PSTRAIN_SERVER_SPARSE_STORAGE_H_
#define PSTRAIN_SERVER_SPARSE_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "server/shard_storage.h"
#include "server/sparse_shard.h"

namespace pstrain::server {

class SparseStorage : public ShardStorage {
 public:
  // The shard `shard` of `num_shards` of every table in job.tables (after ApplyJobDefaults).
  // INVALID_ARGUMENT as SparseShard::Create.
  static absl::StatusOr<std::unique_ptr<SparseStorage>> Create(const JobSpec& job, int shard, int num_shards);

  // Layout: the number of tables (0 for a job without any).
  int num_tables() const { return shard_->num_tables(); }

  int num_parts() const override { return 0; }
  std::string PartName(int i) const override { return ""; }
  int64_t num_values() const override { return 0; }
  absl::StatusOr<std::unique_ptr<StoragePart>> CheckGradient(absl::string_view what, const DecodedPush& push,
                                                             bool allow_nonfinite) const override;
  void AddSquares(const StoragePart& gradient, GradientNorm* norm) const override;
  absl::StatusOr<std::unique_ptr<StoragePart>> CheckRead(absl::string_view what, const ReadAsk& ask) const override;
  std::unique_ptr<GradientSlot> NewSlot() const override;
  void StoreGradient(StoragePart& gradient, GradientSlot* slot) const override;
  void ClearSlot(GradientSlot* slot) const override;
  void Accumulate(absl::Span<const WeightedSlot> terms) override;
  void ApplySum(int64_t step) override;
  void ApplyGradient(int64_t step, StoragePart& gradient) override;
  void AdvanceClock(int64_t step, int64_t unix_ms) override;
  void Read(const StoragePart& ask, PullAnswer* answer) const override;
  void ReadBeforeLastSum(const StoragePart& ask, PullAnswer* answer) const override;
  void AppendSnapshot(std::vector<TensorChunk>* out) const override {}
  void AppendTableStats(std::vector<TableStats>* out) const override;
  void Save(ShardCheckpoint* ckpt) const override;
  bool CanSaveDelta() const override;
  void AfterCheckpointCut() override;
  absl::StatusOr<std::unique_ptr<PreparedRestore>> PrepareRestore(absl::string_view what,
                                                                  const ShardCheckpoint& ckpt) const override;
  void Install(const ShardCheckpoint& ckpt, std::unique_ptr<PreparedRestore> prepared) override;

 private:
  SparseStorage(std::unique_ptr<SparseShard> shard, std::vector<int> dims);

  void ReadAt(const StoragePart& ask, SparseShard::ReadAt at, PullAnswer* answer) const;

  // The pointer is constant; the tables are not.
  const std::unique_ptr<SparseShard> shard_;
  // SYNC: the step's sum per key; keeps its buffers between steps.
  SparseSum sum_;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SPARSE_STORAGE_H_
