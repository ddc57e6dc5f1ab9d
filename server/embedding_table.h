// One shard of an embedding table: rows of `dim` values keyed by uint64, created on first touch,
// stored as float32 or (TableOptions.row_dtype) at half width, fp16 or bf16, and read as float32.
//
// A table has no fixed vocabulary. A row that was never written holds its initial value, a
// function of (seed, table id, key, element) only (EmbeddingInitialValue), so the model is the
// same whatever the number of servers and whatever order the keys arrive in. Which server holds
// a key is common/key_hash.h's business; this class holds whatever keys it is given.
//
// Layout and memory. The index, a flat_hash_set of (key, row number) packed into 12 bytes and
// searched by key, maps a key to its row; rows live in fixed blocks of kRowsPerBlock records,
// never moved once created (so growth never copies the table or doubles its memory). One record
// is
//
//   [ w: dim floats ][ optimizer state: StateFloatsPerElement * dim floats ][ step: 1 uint32 ]
//                                                                 (the step only for lazy Adam)
//
// so an update touches one contiguous record. Under row_dtype FP16 or BF16, w is dim 16-bit
// codes, padded to a multiple of 4 bytes (common/table_spec.h TableRowValueBytes), and the state
// stays fp32: an update decodes w, runs the optimizer in fp32 exactly as for an fp32 row, and
// rounds the new w to the nearest code (ties to even; fp16 saturates at +-65504 rather than
// overflow). A row's initial value is rounded the same way, and a key without a row reads as that
// rounded value, so creating a row never changes what a key reads. The rounding depends only on
// the value, so replicas and repeated SYNC runs stay bitwise equal. Per row that is the floor (dim * 4 bytes for the
// value plus the optimizer's state) plus the index's slot (12 bytes, where a std::pair would be
// padded to 16, and 1 control byte, at a load factor between 7/16 and 7/8: 14.9 to 29.7 bytes a
// row) plus at most one partly filled block per table. The key stays in the slot, not in the
// record, so that a lookup compares keys without touching the row (whose fetch the loops
// prefetch ahead).
// bytes_used() reports this estimate; embedding_table_test measures it against the heap.
//
// Admission (TableOptions.admission, server/row_admission.h): an update of a key without a row
// creates the row only if the table's policy admits the key; otherwise that key's gradient is
// dropped and counted (stats().refused), and the key keeps reading as its initial value.
//
// Eviction (TableOptions.eviction, server/row_eviction.h): after an update, when due, the rows the
// policy picks leave (counters().evicted, a tombstone each); their row numbers are reused by the
// next rows created. A key that comes back starts again from its initial value and fresh optimizer
// state, like a key never seen (and, under count:N admission, is admitted at once: the sketch
// still counts it).
//
// Requests name keys sorted ascending and unique (the worker de-duplicates a batch's keys and
// sums their gradients), which the table checks: a bad request changes nothing.
//
// Checkpoints: Serialize/Restore (embedding_table_io.cc) write every row with its optimizer
// state in key order, in the format described at Serialize.
//
// Thread safety: not thread-safe. The store that owns a table serializes calls (one lock per
// table shard); const methods may run concurrently with each other.
#ifndef PSTRAIN_SERVER_EMBEDDING_TABLE_H_
#define PSTRAIN_SERVER_EMBEDDING_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/table_spec.h"
#include "proto/job.pb.h"
#include "server/row_admission.h"
#include "server/row_eviction.h"
#include "server/sparse_optimizer.h"

namespace pstrain::server {

struct TableOptions {
  std::string name;   // for messages and checkpoints; not empty
  int32_t id = 0;     // >= 0: the table's position in the job's table list (part of the init hash)
  int dim = 0;        // > 0
  uint64_t seed = 0;  // the job's seed
  // Initial values are uniform in [-init_bound, init_bound); unset means 1/sqrt(dim), 0 means
  // zeros (the usual start for FTRL). >= 0 and finite.
  std::optional<float> init_bound;
  SparseOptimizerOptions optimizer;
  // Which keys become rows (TableSpec.admission; default: every key).
  AdmissionSpec admission;
  // Which rows leave (TableSpec.eviction; default: none).
  EvictionSpec eviction;
  // How the values are stored (TableSpec.row_dtype; default FP32).
  TableSpec::RowDtype row_dtype = TableSpec::FP32;
  // Keep eviction's per-row metadata even without an eviction rule, for EvictToCap (a server
  // under a memory budget, server/table_budget.h).
  bool track_rows = false;
  // Record a tombstone per eviction, for the next checkpoint (on when the job checkpoints: without
  // a checkpoint to record them they would only take memory).
  bool keep_tombstones = false;
  // Remember which rows changed since the last cut (a bit per row), for SerializeDelta (on when
  // the job writes delta checkpoints, JobSpec.full_checkpoint_every > 1).
  bool track_changes = false;
};

// What a table's updates did since it was created (not checkpointed: counts of this process).
struct TableCounters {
  int64_t admitted = 0;  // rows created by updates
  int64_t refused = 0;   // key updates dropped because admission did not admit the key
  int64_t evicted = 0;   // rows that left (eviction)
};

// The initial value of element `element` of row `key` of table `table_id`: uniform in
// [-bound, bound) from a counter-based hash (splitmix64 rounds over the four inputs, as
// model/init.h does for dense tensors); 0 when bound == 0. Stable across builds and machines.
float EmbeddingInitialValue(uint64_t seed, int32_t table_id, uint64_t key, int element, float bound);

// The bound a table of `dim` draws its initial values within when TableSpec.init_bound is unset:
// 1/sqrt(dim), as a table computes it.
float DefaultInitBound(int dim);

class EmbeddingTable {
 public:
  static constexpr int64_t kRowsPerBlock = kTableRowsPerBlock;  // common/table_spec.h
  // Row numbers are uint32: a shard holds at most this many rows.
  static constexpr uint32_t kMaxRows = 0xffffffffu;

  // An empty table. INVALID_ARGUMENT names the bad option (empty name, id < 0, dim <= 0, a bad
  // init_bound, the optimizer's field as ValidateSparseOptimizer words it, or the admission's as
  // ValidateAdmission does).
  static absl::StatusOr<std::unique_ptr<EmbeddingTable>> Create(const TableOptions& options);

  const TableOptions& options() const { return options_; }
  const std::string& name() const { return options_.name; }
  int dim() const { return options_.dim; }
  // The bound the rows were initialized with (init_bound, or 1/sqrt(dim) when unset).
  float init_bound() const { return bound_; }

  int64_t num_rows() const { return static_cast<int64_t>(index_.size()); }

  // Bytes held: the row blocks allocated, the block list, and the hash map's slots and control
  // bytes (capacity * (sizeof(slot) + 1) + one group of cloned control bytes), and admission's
  // sketch. An estimate of the heap used, not counting the allocator's own headers.
  int64_t bytes_used() const;

  const TableCounters& counters() const { return counters_; }
  // Eviction's tombstones since the last DropTombstones (server/row_eviction.h), oldest first;
  // empty without eviction or keep_tombstones.
  std::vector<Tombstone> Tombstones() const;
  // A checkpoint recorded the tombstones (its cut): forgets them.
  void DropTombstones();

  // Writes the rows of `keys` to out[0, keys.size() * dim), row after row, creating the rows
  // that are missing with their initial values (whatever the admission policy: for in-process
  // tools and tests; the server reads with Read). INVALID_ARGUMENT, with nothing created, when
  // keys are not sorted ascending and unique (naming the position and both keys) or out does not
  // hold keys.size() * dim floats; RESOURCE_EXHAUSTED when the new rows could pass kMaxRows.
  absl::Status Pull(absl::Span<const uint64_t> keys, absl::Span<float> out);

  // Like Pull, but creates nothing: a key without a row reads as its initial value. For the
  // server's answers, so that reading keys never grows the table (only updates do), and so that
  // reads may run under a shared lock. Errors as Pull's (no RESOURCE_EXHAUSTED).
  absl::Status Read(absl::Span<const uint64_t> keys, absl::Span<float> out) const;

  // Applies one optimizer update per key with its gradient row grads[i * dim, (i + 1) * dim) at
  // rate `lr` (the scheduled rate for this update; FTRL's alpha), as update number `step` of the
  // store (which admission's probability:p hashes and eviction's clock counts; 0 for callers
  // without a store). A key without a row gets one with its initial value first, so an update never
  // depends on whether a pull came before it, if admission admits the key; otherwise its gradient
  // is dropped (counters().refused).
  // Everything is validated before anything changes: INVALID_ARGUMENT when keys are not sorted
  // and unique, grads does not hold keys.size() * dim floats, a gradient is NaN or infinite
  // (naming the key, its position and the element), or lr is not finite and > 0;
  // RESOURCE_EXHAUSTED when the new rows could pass kMaxRows. `values_before`, when not empty
  // (keys.size() * dim floats, else INVALID_ARGUMENT), receives each key's value as Read gave it
  // just before the update (server/rows_before_update.h), at the cost of one copy per row.
  absl::Status Apply(absl::Span<const uint64_t> keys, absl::Span<const float> grads, float lr, int64_t step = 0,
                     absl::Span<float> values_before = {});

  // The store's update `update`, about to be applied, runs at the scheduler's time `unix_ms`
  // (ASYNC/SSP: its push's lease time; 0: none): eviction's ttl_seconds clock
  // (server/update_clock.h). Nothing without ttl_seconds.
  void AdvanceClock(int64_t update, int64_t unix_ms) {
    if (eviction_ != nullptr) eviction_->AdvanceClock(update, unix_ms);
  }

  // The store's update `update` is applied (whether or not it brought this table keys): when
  // eviction is due after it, the rows the policy picks leave.
  void AfterUpdate(int64_t update);

  // After update `update`, rows leave until at most `cap` remain (a server's memory budget,
  // server/table_budget.h): the least recently updated first (least often first under
  // eviction.order LFU), ties by key; never fewer than eviction.keep_rows remain. Each leaves a
  // tombstone and counts as evicted. REQUIRES: the table was made with track_rows or eviction on.
  void EvictToCap(int64_t cap, int64_t update);
  // The tombstones held (at most RowEviction::kMaxTombstones), and how many went past that since
  // the last DropTombstones.
  int64_t num_tombstones() const;
  int64_t tombstones_lost() const;

  // Copies row `key` (its weights, not its optimizer state) to out[0, dim) and returns true, or
  // returns false, creating nothing, when the key has no row. REQUIRES: out.size() == dim.
  bool Lookup(uint64_t key, absl::Span<float> out) const;

  // Appends the whole table to *out (which it does not clear), rows in ascending key order, so
  // two tables with the same rows serialize to the same bytes whatever their history.
  // Format (little-endian):
  //
  //   offset  size        field
  //   0       8           magic "PSTRAINE"
  //   8       4           uint32 version = 1
  //   12      4           int32 table id
  //   16      4           int32 dim
  //   20      4           int32 optimizer type (SparseOptimizerOptions::Type)
  //   24      4           uint32 record bytes R = value bytes (4 * dim, or 2 * dim rounded up to
  //                       4 under FP16 / BF16) + 4 * (dim * state vectors + has step)
  //   28      4           uint32 name length L, then L bytes of name
  //   32+L    8           uint64 row count N
  //           N * (8 + R) per row: uint64 key, then its record as laid out in memory
  //   (version 2 only) sections, each a uint32 tag, a uint64 length L and L bytes:
  //           tag 1       admission's sketch (count:N)
  //           tag 2       eviction's metadata of every row, in the rows' order (RowEviction)
  //           tag 3       eviction's tombstones (RowEviction)
  //           tag 4       how many tombstones went past the cap since the last cut (uint64;
  //                       only when not 0)
  //           tag 5       the row dtype (uint32 TableSpec::RowDtype; only when not FP32)
  //           tag 6       eviction's ttl_seconds clock (server/update_clock.h Serialize)
  //   end-4   4           uint32 CRC-32 (zlib crc32) of every byte before it
  // A table with neither admission state, eviction nor a half-width dtype writes version 1, as
  // before they existed. Version 3 is SerializeDelta's. server/table_format.h reads and writes
  // this layout.
  void Serialize(std::string* out) const;

  // Appends the rows created or updated since the last cut (ForgetChanges, or Restore), in the
  // format of Serialize with version 3 (server/table_format.h): those rows in ascending key order
  // with their records and eviction metadata, and the same sections as Serialize (the sketch and
  // the clock whole, the tombstones since the cut). server/table_delta.h merges it onto the whole
  // table of the previous cut, giving what Serialize would write now, byte for byte.
  // REQUIRES: track_changes; and tombstones_lost() == 0, or the merge cannot drop the rows whose
  // tombstones were lost (the store then writes a whole table instead).
  void SerializeDelta(std::string* out) const;
  // A checkpoint's cut: no row has changed since.
  void ForgetChanges() { std::fill(changed_.begin(), changed_.end(), 0); }

  // Replaces every row (and admission's sketch, eviction's metadata and tombstones) with those of
  // `data` (a Serialize output). A buffer without them (version 1, or written without admission or
  // eviction) leaves count:N's sketch empty and every row as last updated by update
  // `last_update` (the checkpoint's last update: its step - 1), so that turning eviction on at a
  // resume gives every row a full TTL from there. On error nothing changes:
  // DATA_LOSS for a truncated or corrupt buffer (bad magic, size or CRC, keys out of order, a
  // sketch of another size);
  // FAILED_PRECONDITION when it belongs to another table (name, id, dim, optimizer type or row
  // dtype differ), naming both values; INVALID_ARGUMENT for a value or state that is NaN or
  // infinite, naming the row and element; UNIMPLEMENTED for an unknown version.
  absl::Status Restore(absl::string_view data, int64_t last_update = -1);

 private:
  explicit EmbeddingTable(const TableOptions& options);

  // One slot of the index: a key and its row number, 12 bytes. Packed: read its members by value
  // (no reference may bind to a misaligned member).
  struct __attribute__((packed)) KeyRow {
    uint64_t key;
    uint32_t row;
  };
  static_assert(sizeof(KeyRow) == 12, "a slot is 12 bytes");
  // Hash and equality by key alone, and lookups by a bare key (heterogeneous lookup).
  struct KeyRowHash {
    using is_transparent = void;
    size_t operator()(const KeyRow& s) const { return absl::Hash<uint64_t>()(uint64_t{s.key}); }
    size_t operator()(uint64_t key) const { return absl::Hash<uint64_t>()(key); }
  };
  struct KeyRowEq {
    using is_transparent = void;
    bool operator()(const KeyRow& a, const KeyRow& b) const { return a.key == b.key; }
    bool operator()(const KeyRow& a, uint64_t b) const { return a.key == b; }
    bool operator()(uint64_t a, const KeyRow& b) const { return a == b.key; }
  };
  using Index = absl::flat_hash_set<KeyRow, KeyRowHash, KeyRowEq>;

  // Admission and eviction as `options` ask, each null when off; INVALID_ARGUMENT naming the
  // field. For Create, and for Restore, which builds fresh ones so that an error changes nothing.
  static absl::Status MakePolicies(const TableOptions& options, std::unique_ptr<RowAdmission>* admission,
                                   std::unique_ptr<RowEviction>* eviction);

  // OK, or RESOURCE_EXHAUSTED when num_keys new rows could pass kMaxRows.
  absl::Status CheckRoomFor(size_t num_keys, const char* op) const;
  // Index of key's row, creating and initializing it when missing (by update `update`: eviction's
  // clock). REQUIRES: CheckRoomFor.
  uint32_t FindOrCreateRow(uint64_t key, int64_t update);
  // Serialize's rows (all of them) or SerializeDelta's (the changed ones), as (key, row number).
  void WriteRows(std::vector<std::pair<uint64_t, uint32_t>> rows, bool delta, std::string* out) const;
  // Whether row number `row` changed since the last cut; and marks it changed (track_changes).
  bool Changed(uint32_t row) const { return row / 64 < changed_.size() && (changed_[row / 64] >> (row % 64) & 1) != 0; }
  void MarkChanged(uint32_t row) {
    if (!options_.track_changes) return;
    if (row / 64 >= changed_.size()) changed_.resize(row / 64 + 1, 0);
    changed_[row / 64] |= uint64_t{1} << (row % 64);
  }
  // The rows eviction picks after update `update` leave.
  void Evict(int64_t update);
  // Rows `leaving` leave after update `update`: their numbers are freed, and each leaves a
  // tombstone.
  void Remove(const std::vector<RowEviction::Row>& leaving, int64_t update);
  // Visits every (key, row number), for eviction's Select.
  RowEviction::RowVisitor EveryRow() const;
  float* Record(uint32_t row) { return blocks_[row / kRowsPerBlock].get() + (row % kRowsPerBlock) * record_floats_; }
  const float* Record(uint32_t row) const {
    return blocks_[row / kRowsPerBlock].get() + (row % kRowsPerBlock) * record_floats_;
  }
  // A block of kRowsPerBlock uninitialized records.
  std::unique_ptr<float[]> NewBlock() const;
  // A record's value as floats, to out[0, dim): a copy in FP32, decoded otherwise.
  void ReadValue(const float* record, float* out) const;
  // Stores value[0, dim) into a record: a copy in FP32, rounded to the row dtype otherwise.
  void WriteValue(const float* value, float* record) const;
  // A key's initial value in fp32, to out[0, dim): what a new row stores (rounded by WriteValue).
  void UnroundedInitialValue(uint64_t key, float* out) const;
  // The value a key without a row reads, to out[0, dim): its initial value as a row would store it.
  void InitialValue(uint64_t key, float* out) const;
  // The optimizer state of a record (after its value words).
  float* State(float* record) const { return record + value_words_; }
  const float* State(const float* record) const { return record + value_words_; }

  // Constant after construction.
  TableOptions options_;
  float bound_;
  int value_words_;    // 4-byte words of the value: dim in FP32, ceil(dim / 2) otherwise
  int state_floats_;   // optimizer state floats per row (StateFloatsPerElement * dim)
  bool has_step_;      // the record ends with a uint32 step count
  int record_floats_;  // value_words_ + state_floats_ + has_step_
  // Apply's decoded value under a half-width dtype (dim floats).
  std::vector<float> scratch_;

  // Null for admission "always".
  std::unique_ptr<RowAdmission> admission_;
  // Null without eviction.
  std::unique_ptr<RowEviction> eviction_;

  // The rows: index_ holds (key, row number); row r lives in blocks_[r / kRowsPerBlock].
  Index index_;
  std::vector<std::unique_ptr<float[]>> blocks_;
  // Records handed out (rows plus free_rows_), and the row numbers evicted rows left.
  uint32_t num_records_ = 0;
  std::vector<uint32_t> free_rows_;
  // track_changes: bit r set when row number r was created or updated since the last cut.
  std::vector<uint64_t> changed_;
  TableCounters counters_;
};

// OK, or INVALID_ARGUMENT naming the position of the first key that is not greater than the one
// before it. `what` starts the message ("table 'user' pull").
absl::Status CheckSortedUniqueKeys(absl::Span<const uint64_t> keys, absl::string_view what);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_EMBEDDING_TABLE_H_
