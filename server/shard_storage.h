// The storage a ParameterStore drives: one kind of this server's values and their optimizer state.
// ParameterStore (server/parameter_store.h) keeps the consistency protocol (membership epochs,
// request ids, which workers a SYNC step sums and with which weights, ASYNC/SSP clocks, leases,
// parked requests, checkpoint cuts); a ShardStorage checks, stores, sums, updates, reads and
// checkpoints values. The store holds a list of storages (today server::DenseShard, the shard
// map's dense chunks, then server::SparseStorage, the embedding-table rows) and drives every one
// the same way, with no branch on which kind it holds:
//
//   request (no lock)  CheckGradient / CheckRead     -> a StoragePart per storage, or an error
//   SYNC push          StoreGradient(part, slot)     the worker's GradientSlot, until the step
//   SYNC step          Accumulate(slots in ascending rank, weights n_r / N), then ApplySum(step)
//                      ... or ClearSlot when the step is dropped (membership change, rollback)
//   ASYNC/SSP push     AdvanceClock(step, lease time), then ApplyGradient(step, part)
//   answer             Read(read part, target); SYNC, a pull for the step just applied:
//                      ReadBeforeLastSum(read part, target)
//   checkpoint         Save, then AfterCheckpointCut; PrepareRestore (no lock), then Install, then
//                      AfterCheckpointCut
//
// A request's gradient or read ask is checked and decoded once, outside the lock, into an opaque
// StoragePart that only the storage that made it reads; a worker's stored SYNC gradient lives in
// an opaque GradientSlot the storage creates. So the per-worker and per-step gradient state of
// every kind of storage lives here, not in the store.
//
// Bitwise repeatability: Accumulate receives the terms in the order the protocol fixes (ascending
// worker rank) with the weights it computed, and each storage keeps its own float order (dense:
// the first term written, the others added, a lone term applied as it is; rows: SparseSum's merge
// per key). A sum never depends on the order in which pushes arrived.
//
// Parts: a storage may lay its values out as numbered parts (dense: chunks) that a partial SYNC
// push covers a contiguous run of; the store's part numbers are the storages' parts in list order.
// A storage without parts (rows: keyed, not laid out) has num_parts() == 0 and refuses partial
// pushes that bring it anything.
//
// Thread safety: none. The ParameterStore calls the layout calls (marked "layout") and the
// checking calls (CheckGradient, AddSquares, CheckRead, PrepareRestore), which read only what is
// constant after construction (or, PrepareRestore, nothing the others write), without its lock;
// every other call under its mutex.
#ifndef PSTRAIN_SERVER_SHARD_STORAGE_H_
#define PSTRAIN_SERVER_SHARD_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/payload_view.h"
#include "common/tensor_messages.h"
#include "proto/ps.pb.h"
#include "server/checkpoint.h"
#include "server/store_request.h"

namespace pstrain::server {

// What an answer carries: parts [first_part, first_part + num_parts) (num_parts < 0: all, 0:
// none) and the rows of `keys` (PullRequest.sparse, PushRequest.pull_sparse; as received,
// borrowed for the call).
struct ReadAsk {
  int first_part = 0;
  int num_parts = -1;
  absl::Span<const IncomingRows> keys;
};

// A request's part for one storage, checked and decoded by that storage (CheckGradient,
// CheckRead). It may borrow the request's bytes, so it is used only within the call that checked
// it, except a read part, which owns what it holds and may wait with a parked answer.
class StoragePart {
 public:
  virtual ~StoragePart() = default;
};

// A request's parts, one per storage in the store's list order (CheckGradient or CheckRead).
using StorageParts = absl::InlinedVector<std::unique_ptr<StoragePart>, 2>;

// A live worker's SYNC gradient for the current step, made by one storage's NewSlot and given
// back only to it. Allocated when the worker joins, reused every step.
class GradientSlot {
 public:
  virtual ~GradientSlot() = default;
};

// A checkpoint's part for one storage, checked and built by PrepareRestore; null when the
// storage installs straight from the checkpoint.
class PreparedRestore {
 public:
  virtual ~PreparedRestore() = default;
};

// One term of a SYNC step's sum: a worker's slot and its weight n_r / N.
struct WeightedSlot {
  const GradientSlot* slot = nullptr;
  float weight = 0.0f;
};

// The squared L2 norm of a push's gradient over this server's part, and its largest part, for
// JobSpec.max_grad_norm_per_sample. Storages add to it in list order.
struct GradientNorm {
  double sum_of_squares = 0;
  // The squares of the values the norm leaves out (averaged tensors' weights). Only whether the
  // total is finite counts: a sum of squares in double is finite exactly when every value is, so
  // with the guard on the store checks finiteness through these sums instead of a pass of its own.
  double uncounted_squares = 0;
  double largest = -1;  // the largest part's sum of squares
  std::string largest_name;
};

// Rows and bytes of an embedding table on this shard, for logs and the run summary.
struct TableStats {
  std::string name;
  int64_t rows = 0;
  int64_t bytes_used = 0;
  // dim x 4 x (1 + optimizer state vectors) (+ 4 for lazy Adam): the floor per row.
  int64_t floor_bytes_per_row = 0;
  // Admission (TableSpec.admission) since the store was created: rows created by updates, and key
  // updates dropped because the key was not admitted.
  int64_t admitted = 0;
  int64_t refused = 0;
  // Eviction (TableSpec.eviction) since the store was created: rows that left.
  int64_t evicted = 0;
  // Eviction's tombstones held: the evictions since the last checkpoint's cut, when the job
  // checkpoints (at most 65,536 per table; server/row_eviction.h).
  int64_t tombstones = 0;
};

class ShardStorage {
 public:
  virtual ~ShardStorage() = default;

  // Layout: the storage's parts (0: none) and their names in error messages ("tensor '<name>' at
  // offset <offset>"); REQUIRES 0 <= i < num_parts().
  virtual int num_parts() const = 0;
  virtual std::string PartName(int i) const = 0;
  // Layout: floats a whole answer writes to PullAnswer::values (0: none).
  virtual int64_t num_values() const = 0;

  // Checks this storage's part of a push (server/store_request.h; its shapes, keys and, unless
  // allow_nonfinite, that every value is finite; pull_keys are CheckRead's) and decodes it into a
  // StoragePart for StoreGradient, AddSquares and
  // ApplyGradient; the part may borrow `push` (see StoragePart). A push that brings this storage
  // nothing decodes to an empty gradient. INVALID_ARGUMENT prefixed with `what`; nothing changes.
  virtual absl::StatusOr<std::unique_ptr<StoragePart>> CheckGradient(absl::string_view what, const DecodedPush& push,
                                                                     bool allow_nonfinite) const = 0;
  // Adds the squares of a CheckGradient part's gradient to `norm`, part by part (dense: the chunks
  // but the averaged tensors', which carry weights; rows: each table's).
  virtual void AddSquares(const StoragePart& gradient, GradientNorm* norm) const = 0;
  // Checks and decodes what an answer asks of this storage. The part owns what it holds (it may
  // wait with a parked answer). INVALID_ARGUMENT prefixed with `what`.
  virtual absl::StatusOr<std::unique_ptr<StoragePart>> CheckRead(absl::string_view what, const ReadAsk& ask) const = 0;

  // SYNC: a worker's gradient slot, empty. Allocates the storage's full gradient (dense: every
  // chunk's floats) once, so a step allocates nothing.
  virtual std::unique_ptr<GradientSlot> NewSlot() const = 0;
  // SYNC: stores a CheckGradient part in `slot` (a partial push: only its parts), taking over what
  // the part holds. REQUIRES: `slot` from this storage's NewSlot.
  virtual void StoreGradient(StoragePart& gradient, GradientSlot* slot) const = 0;
  // SYNC: forgets what `slot` holds for the step (applied or dropped).
  virtual void ClearSlot(GradientSlot* slot) const = 0;
  // SYNC: makes the step's gradient sum_i weight_i x terms[i].slot, adding the terms in the order
  // given (the protocol's: ascending worker rank), into buffers the storage keeps between steps.
  // REQUIRES: !terms.empty(); the slots stay unchanged until ApplySum.
  virtual void Accumulate(absl::Span<const WeightedSlot> terms) = 0;
  // SYNC: one optimizer update with the sum Accumulate made, as update number `step` of the job
  // (the learning-rate schedule's step).
  virtual void ApplySum(int64_t step) = 0;
  // ASYNC/SSP: one optimizer update with a CheckGradient part, as update number `step`.
  virtual void ApplyGradient(int64_t step, StoragePart& gradient) = 0;
  // ASYNC/SSP: update number `step`, applied next, runs at the scheduler's time `unix_ms` (its
  // push's lease time, PushRequest.lease_granted_unix_ms; 0: none). The embedding tables' clock
  // for eviction's ttl_seconds (server/update_clock.h); storages without one ignore it.
  virtual void AdvanceClock(int64_t step, int64_t unix_ms) {}

  // Answers a CheckRead part with the current values into `answer` (server/store_request.h);
  // appends to resp's chunks or sparse entries, which the caller cleared, and advances
  // answer->values past the values it wrote.
  virtual void Read(const StoragePart& ask, PullAnswer* answer) const = 0;
  // SYNC: answers like Read, but with the values as they were before the last ApplySum: a pull
  // for the step just applied, which a worker recomputing that step after a membership change
  // sends (server/rows_before_update.h). Storages a recomputing worker never pulls from for that
  // step (dense: the worker keeps the step's weights itself) answer like Read.
  virtual void ReadBeforeLastSum(const StoragePart& ask, PullAnswer* answer) const { Read(ask, answer); }
  // Appends every part with its current values (TensorChunk.data: little-endian floats).
  virtual void AppendSnapshot(std::vector<TensorChunk>* out) const = 0;
  // Appends the rows and bytes of each embedding table it holds.
  virtual void AppendTableStats(std::vector<TableStats>* out) const = 0;

  // Fills the storage's part of a checkpoint (dense: chunks, layout fingerprint, state-vector
  // count, weights and state; rows: the serialized tables, or when ckpt->base_step >= 0 the rows
  // changed since the last cut). The protocol fills rank, step, mode, membership epoch and
  // base_step first.
  virtual void Save(ShardCheckpoint* ckpt) const = 0;
  // Whether Save can write a delta now (a checkpoint with base_step >= 0: only what changed since
  // the last cut; server/checkpoint_chain.h). Storages that save whole in every checkpoint (dense)
  // always can.
  virtual bool CanSaveDelta() const { return true; }
  // Checks that `ckpt`'s part fits this storage and builds what Install swaps in, so that a bad
  // checkpoint changes nothing: FAILED_PRECONDITION for another layout, optimizer or number of
  // tables, INVALID_ARGUMENT for a checkpoint inconsistent in itself, DATA_LOSS for a table that
  // does not parse; messages prefixed with `what`.
  virtual absl::StatusOr<std::unique_ptr<PreparedRestore>> PrepareRestore(absl::string_view what,
                                                                          const ShardCheckpoint& ckpt) const = 0;
  // Installs the values and optimizer state of a checkpoint PrepareRestore accepted, with what it
  // built.
  virtual void Install(const ShardCheckpoint& ckpt, std::unique_ptr<PreparedRestore> prepared) = 0;
  // A checkpoint's cut: after Save for a checkpoint (on a SYNC copy, at the step its primary saves
  // one, without a file) and after Install (a restored store stands just after the checkpoint's
  // cut). Forgets what only the next checkpoint's readers need, once one has recorded it: the
  // embedding tables' tombstones.
  virtual void AfterCheckpointCut() {}
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SHARD_STORAGE_H_
