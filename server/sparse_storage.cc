#include "server/sparse_storage.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/float_ops.h"

namespace pstrain::server {
namespace {

// A push's row gradients, or an answer's keys, checked and copied out of the received bytes.
struct RowsPart : StoragePart {
  SparseGradient rows;
};

// A worker's SYNC row gradients for the step.
struct RowsSlot : GradientSlot {
  SparseGradient rows;
};

// A checkpoint's tables, restored and ready to swap in.
struct PreparedTables : PreparedRestore {
  explicit PreparedTables(std::unique_ptr<SparseShard::Prepared> t) : tables(std::move(t)) {}
  std::unique_ptr<SparseShard::Prepared> tables;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SparseStorage>> SparseStorage::Create(const JobSpec& job, int shard, int num_shards) {
  absl::StatusOr<std::unique_ptr<SparseShard>> tables = SparseShard::Create(job, shard, num_shards);
  if (!tables.ok()) return tables.status();
  std::vector<int> dims;
  for (int t = 0; t < (*tables)->num_tables(); ++t) dims.push_back((*tables)->dim(t));
  return std::unique_ptr<SparseStorage>(new SparseStorage(std::move(tables).value(), std::move(dims)));
}

SparseStorage::SparseStorage(std::unique_ptr<SparseShard> shard, std::vector<int> dims)
    : shard_(std::move(shard)), sum_(std::move(dims)) {}

absl::StatusOr<std::unique_ptr<StoragePart>> SparseStorage::CheckGradient(absl::string_view what,
                                                                          const DecodedPush& push,
                                                                          bool allow_nonfinite) const {
  if (push.header.partial() && !push.rows.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a partial push carries ", push.rows.size(),
                                                   " embedding-row entries; rows travel with whole pushes only"));
  }
  auto part = std::make_unique<RowsPart>();
  absl::Status status = shard_->Check(what, push.rows, SparseShard::Expect::kRows, allow_nonfinite, &part->rows);
  if (!status.ok()) return status;
  return part;
}

void SparseStorage::AddSquares(const StoragePart& gradient, GradientNorm* norm) const {
  for (const TableGradient& table : static_cast<const RowsPart&>(gradient).rows) {
    const double squares = SumOfSquares(table.rows().data(), static_cast<int64_t>(table.rows().size()));
    norm->sum_of_squares += squares;
    if (squares > norm->largest) {
      norm->largest = squares;
      norm->largest_name = absl::StrCat("the rows of table '", shard_->name(table.table), "'");
    }
  }
}

absl::StatusOr<std::unique_ptr<StoragePart>> SparseStorage::CheckRead(absl::string_view what,
                                                                      const ReadAsk& ask) const {
  auto part = std::make_unique<RowsPart>();
  absl::Status status = shard_->Check(what, ask.keys, SparseShard::Expect::kKeys, false, &part->rows);
  if (!status.ok()) return status;
  return part;
}

std::unique_ptr<GradientSlot> SparseStorage::NewSlot() const { return std::make_unique<RowsSlot>(); }

void SparseStorage::StoreGradient(StoragePart& gradient, GradientSlot* slot) const {
  static_cast<RowsSlot*>(slot)->rows = std::move(static_cast<RowsPart&>(gradient).rows);
}

void SparseStorage::ClearSlot(GradientSlot* slot) const { static_cast<RowsSlot*>(slot)->rows.clear(); }

void SparseStorage::Accumulate(absl::Span<const WeightedSlot> terms) {
  // The same weights and rank order as the dense sum, per key: a key only some workers touched
  // sums theirs.
  for (const WeightedSlot& term : terms) sum_.Add(static_cast<const RowsSlot*>(term.slot)->rows, term.weight);
}

void SparseStorage::ApplySum(int64_t step) { shard_->ApplyKeepingRowsBefore(sum_.Take(), step); }

void SparseStorage::ApplyGradient(int64_t step, StoragePart& gradient) {
  const SparseGradient& rows = static_cast<const RowsPart&>(gradient).rows;
  shard_->Apply(rows, step);  // also when it brings no rows: the tables' eviction clock moves
}

void SparseStorage::Read(const StoragePart& ask, PullAnswer* answer) const {
  ReadAt(ask, SparseShard::ReadAt::kNow, answer);
}

void SparseStorage::ReadBeforeLastSum(const StoragePart& ask, PullAnswer* answer) const {
  ReadAt(ask, SparseShard::ReadAt::kBeforeLastUpdate, answer);
}

void SparseStorage::ReadAt(const StoragePart& ask, SparseShard::ReadAt at, PullAnswer* answer) const {
  const SparseGradient& keys = static_cast<const RowsPart&>(ask).rows;
  if (keys.empty()) return;  // an answer without rows leaves answer->rows untouched
  if (answer->rows != nullptr) {
    shard_->Read(keys, answer->rows, at);
  } else {
    shard_->Read(keys, answer->resp->mutable_sparse(), at);
  }
}

void SparseStorage::AppendTableStats(std::vector<TableStats>* out) const {
  for (TableStats& t : shard_->Stats()) out->push_back(std::move(t));
}

void SparseStorage::Save(ShardCheckpoint* ckpt) const {
  ckpt->tables = ckpt->base_step >= 0 ? shard_->SaveDelta() : shard_->Save();
}

bool SparseStorage::CanSaveDelta() const { return shard_->CanSaveDelta(); }

void SparseStorage::AdvanceClock(int64_t step, int64_t unix_ms) { shard_->AdvanceClock(step, unix_ms); }

void SparseStorage::AfterCheckpointCut() { shard_->AfterCut(); }

absl::StatusOr<std::unique_ptr<PreparedRestore>> SparseStorage::PrepareRestore(absl::string_view what,
                                                                               const ShardCheckpoint& ckpt) const {
  absl::StatusOr<std::unique_ptr<SparseShard::Prepared>> tables = shard_->Prepare(ckpt.tables, ckpt.step);
  if (!tables.ok()) return absl::Status(tables.status().code(), absl::StrCat(what, ": ", tables.status().message()));
  return std::make_unique<PreparedTables>(std::move(tables).value());
}

void SparseStorage::Install(const ShardCheckpoint& /*ckpt*/, std::unique_ptr<PreparedRestore> prepared) {
  shard_->Install(std::move(static_cast<PreparedTables&>(*prepared).tables));
}

}  // namespace pstrain::server
