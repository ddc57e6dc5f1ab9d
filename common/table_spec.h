// Embedding-table declarations of a job (JobSpec.tables, proto/job.proto): their defaults, their
// checks, and the tables model "ctr" declares for its data.
//
// common/job_spec.h calls these from ApplyJobDefaults and ValidateJobSpec, so a bad table fails
// before any process starts.
#ifndef PSTRAIN_COMMON_TABLE_SPEC_H_
#define PSTRAIN_COMMON_TABLE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace pstrain {

// The built-in CTR model (model/ctr_model.h).
inline constexpr char kCtrModel[] = "ctr";

// JobSpec.model for a model the workers declare (Scheduler.DeclareModel) instead of a built-in one:
// its tables, if any, come with the declaration.
inline constexpr char kExternalModel[] = "external";

// Model ctr's default rate for its Adagrad rows (table_optimizer.lr).
inline constexpr float kCtrAdagradLr = 2.0f;
// With ctr_interaction FM (DeepFM), whose pairwise term multiplies rows with rows: the rows'
// default Adagrad rate and, in a file job, their default init bound (docs/performance.md, "CTR
// accuracy against the planted model": the MLP's 2.0 and 1/sqrt(dim) cost DeepFM 0.028 AUC).
inline constexpr float kCtrFmAdagradLr = 0.3f;
inline constexpr float kCtrFmInitBound = 0.01f;

// Largest TableSpec.dim accepted.
inline constexpr int kMaxTableDim = 4096;

// Fills a sparse optimizer's unset fields with their documented defaults. Idempotent.
void ApplySparseOptimizerDefaults(SparseOptimizerSpec* spec);

// Completes the job's tables: model "ctr" with no tables gets one per categorical field of its
// data format (criteo: "C1".."C26"; libsvm: "features"), each of embedding_dim floats (default 16)
// updated by table_optimizer; every table's optimizer gets its defaults. Idempotent.
void ApplyTableDefaults(JobSpec* job);

// Checks the tables after ApplyTableDefaults: names unique and of [A-Za-z0-9_.-], dim in
// [1, kMaxTableDim], init_bound finite and >= 0, the optimizer's fields in range, and a memory
// budget (table_memory_budget) of at least every table's fixed bytes and one row of each.
// INVALID_ARGUMENT names the field ("tables[2].dim: got 0, expected in [1, 4096]").
absl::Status ValidateTables(const JobSpec& job);

// Table admission (TableSpec.admission; server/row_admission.h says what each policy does).
inline constexpr int kMaxAdmissionCount = 255;  // count:N saturates its one-byte counters here
inline constexpr int64_t kDefaultSketchBytes = int64_t{1} << 20;
inline constexpr int64_t kMinSketchBytes = 4096;
inline constexpr int64_t kMaxSketchBytes = int64_t{1} << 30;

// Fills count:N's unset sketch size (kDefaultSketchBytes). Idempotent.
void ApplyAdmissionDefaults(AdmissionSpec* spec);
// "always", "count:N" or "probability:P" (the spelling of --table_admission and of pstrain.torch's
// admit=); INVALID_ARGUMENT saying what is expected otherwise. The numbers are checked by
// ValidateAdmission.
absl::StatusOr<AdmissionSpec> ParseAdmission(absl::string_view text);
// The spelling ParseAdmission reads ("count:2").
std::string AdmissionName(const AdmissionSpec& spec);
// INVALID_ARGUMENT naming the field (prefixed with `field`, e.g. "tables[2].admission") for a
// count outside [1, 255], a probability outside (0, 1], a sketch outside [4 KiB, 1 GiB], or a
// count's or probability's field set for another policy.
absl::Status ValidateAdmission(absl::string_view field, const AdmissionSpec& spec);

// Table eviction (TableSpec.eviction; server/row_eviction.h).
inline constexpr int64_t kDefaultEvictEveryUpdates = 100;
inline constexpr int64_t kMaxEvictEveryUpdates = 1000000;
// The longest ttl_seconds: about 31 years (its milliseconds fit an int64 with room to spare).
inline constexpr int64_t kMaxTtlSeconds = 1000000000;
// Whether `spec` evicts anything at all.
bool EvictionOn(const EvictionSpec& spec);
// Fills every_updates when eviction is on: kDefaultEvictEveryUpdates, or a tenth of ttl_updates
// when that is smaller (at least 1), so that no row outlives its TTL by more than a tenth.
// Idempotent.
void ApplyEvictionDefaults(EvictionSpec* spec);
// INVALID_ARGUMENT naming the field (prefixed with `field`) for a negative TTL, cap, keep-floor or
// norm, a ttl_seconds past kMaxTtlSeconds, a cap below the keep-floor, an interval outside
// [1, 10^6] or an unknown order. (ValidateTables also refuses ttl_seconds in a SYNC job.)
absl::Status ValidateEviction(absl::string_view field, const EvictionSpec& spec);

// "adagrad", "sgd", "lazy_adam", "ftrl" (the spelling of --table_optimizer); INVALID_ARGUMENT
// listing them otherwise.
absl::StatusOr<SparseOptimizerSpec::Type> ParseSparseOptimizer(absl::string_view name);
std::string SparseOptimizerTypeName(SparseOptimizerSpec::Type type);

// "fp32", "fp16", "bf16" (the spelling of --table_row_dtype and pstrain.torch's row_dtype=);
// INVALID_ARGUMENT listing them otherwise.
absl::StatusOr<TableSpec::RowDtype> ParseRowDtype(absl::string_view name);
std::string RowDtypeName(TableSpec::RowDtype dtype);
// A table's effective row dtype: its own, else FP32 (ApplyTableDefaults fills it from the job's).
inline TableSpec::RowDtype RowDtypeOf(const TableSpec& table) {
  return table.has_row_dtype() ? table.row_dtype() : TableSpec::FP32;
}
// Bytes of one row's value as stored: dim x 4 in FP32; dim x 2, rounded up to 4, in FP16 / BF16
// (the record stays 4-byte aligned for the fp32 state after it).
int64_t TableRowValueBytes(int dim, TableSpec::RowDtype dtype);

// The shape of model "ctr" for a job (after ApplyJobDefaults): what the scheduler lays out and the
// workers build (model/ctr_model.h), so both derive it here.
struct CtrShape {
  int num_fields = 0;  // categorical fields: one table each (job.tables, in order)
  int num_dense = 0;   // dense features: 13 for criteo, 0 for libsvm
  int dim = 0;         // every table's dim (embedding_dim)
  std::vector<int> hidden_sizes;
};
CtrShape CtrShapeOf(const JobSpec& job);

// Bytes of one row's weights and optimizer state (the memory floor per row): the value
// (TableRowValueBytes) plus dim x 4 x state vectors, plus 4 for lazy Adam's step count.
int64_t TableRowFloorBytes(const TableSpec& table);

// The memory budget (JobSpec.table_memory_budget; server/table_budget.h) counts a table's shard
// on a server as TableBudgetFixedBytes + rows x TableBudgetRowBytes: an upper bound of what the
// table holds (EmbeddingTable::bytes_used), from its row count, which replicas and restored
// servers share.
//
// OK without a budget, or with one of at least every table's fixed bytes and one row of each;
// INVALID_ARGUMENT naming table_memory_budget (and the least it accepts) otherwise, and for a
// budget without tables, except for an external model's job, whose tables come with its model's
// declaration (the scheduler checks the budget against them then). ValidateTables calls it.
absl::Status ValidateMemoryBudget(const JobSpec& job);

// Rows per block of a table's rows (EmbeddingTable allocates rows a block at a time).
inline constexpr int64_t kTableRowsPerBlock = 1024;
// Eviction's tombstones a table keeps (the newest; server/row_eviction.h), 16 bytes each.
inline constexpr int64_t kMaxTableTombstones = int64_t{1} << 16;
inline constexpr int64_t kTableTombstoneBytes = 16;
// One row: its floor, eviction's metadata (an int64 last update and a uint32 count), and its
// index slot (12 bytes and a control byte) at the index's lowest load factor (7/16).
int64_t TableBudgetRowBytes(const TableSpec& table);
// Whatever the rows: one block of rows (and of their eviction metadata) not yet used, count:N
// admission's sketch, and the most tombstones eviction keeps (1 MiB).
int64_t TableBudgetFixedBytes(const TableSpec& table);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TABLE_SPEC_H_
