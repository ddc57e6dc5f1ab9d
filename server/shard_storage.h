// The storage a ParameterStore drives: this server's part of the model and its optimizer state.
// ParameterStore (server/parameter_store.h) keeps the consistency protocol (membership epochs,
// request ids, the SYNC step and its rank-ordered sum, ASYNC/SSP clocks, leases, parked requests,
// checkpoint cuts); a ShardStorage only stores, updates, reads and checkpoints values.
//
// Gradients and answers are in the storage's local layout: num_elements() floats, its parts
// ("chunks") back to back in part order. Requests name parts by index; a push or pull may cover
// a contiguous run of parts [first, first + count).
//
// Today's implementation is server::DenseShard (server/dense_shard.h): the shard map's dense
// chunks. A sparse embedding table would implement the same calls with keys instead of offsets:
// ValidateGradient/DecodeGradient over (sorted keys, rows) instead of (chunk, floats), Apply over
// the rows touched, Read of the rows asked for, Save/Install of its rows. The SYNC sum over
// workers, which the protocol does today over the dense local layout, would then move behind this
// interface (an "accumulate" call), since a sum of sparse gradients merges keys.
//
// Thread safety: none. The ParameterStore calls every method that touches values (Apply,
// DecodeGradient into the store's buffers, Read, Snapshot, Save, Install) under its mutex. The
// layout methods (marked "layout") read only what is constant after construction and may be
// called without the lock.
#ifndef PSTRAIN_SERVER_SHARD_STORAGE_H_
#define PSTRAIN_SERVER_SHARD_STORAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/payload_view.h"
#include "proto/ps.pb.h"
#include "server/checkpoint.h"

namespace pstrain::server {

class ShardStorage {
 public:
  virtual ~ShardStorage() = default;

  // Layout: floats in the local layout (the size of a whole answer or gradient), and parts.
  virtual int64_t num_elements() const = 0;
  virtual int num_parts() const = 0;
  // Layout: "tensor '<name>' at offset <offset>", naming part `i` in error messages.
  virtual std::string PartName(int i) const = 0;

  // Layout: checks that `req`'s chunks (with data `values[i]`) are a valid gradient for parts
  // [first, first + chunks) (a whole push: first == 0 and every part), their shapes and, unless
  // allow_nonfinite, that every value is finite. INVALID_ARGUMENT prefixed with `what`.
  // REQUIRES: values.size() == req.chunks_size().
  virtual absl::Status ValidateGradient(absl::string_view what, const PushRequest& req,
                                        absl::Span<const PayloadView> values, bool allow_nonfinite) const = 0;
  // Decodes the gradient of a validated `req` into `dst` (local layout; only its parts' range is
  // written). Does not touch the stored values.
  virtual void DecodeGradient(const PushRequest& req, absl::Span<const PayloadView> values, float* dst) const = 0;

  // One optimizer update of every part with `grad` (local layout), as update number `step` of the
  // job (the learning-rate schedule's step).
  virtual void Apply(int64_t step, const float* grad) = 0;

  // Appends parts [first, first + count) (count < 0: all) to resp's chunks. With `values`
  // non-null their values go there, back to back, and the chunks carry no data.
  virtual void Read(int first, int count, PullResponse* resp, float* values) const = 0;
  // Every part with its current values (TensorChunk.data: little-endian floats).
  virtual std::vector<TensorChunk> Snapshot() const = 0;

  // Fills the storage's part of a checkpoint: chunks, layout fingerprint, state-vector count,
  // weights and state. The protocol fills rank, step, mode and membership epoch.
  virtual void Save(ShardCheckpoint* ckpt) const = 0;
  // Layout: whether `ckpt` fits this storage (chunk list, fingerprint, optimizer, vector sizes):
  // FAILED_PRECONDITION for another layout or optimizer, INVALID_ARGUMENT for a checkpoint
  // inconsistent in itself; messages prefixed with `what`.
  virtual absl::Status ValidateCheckpoint(absl::string_view what, const ShardCheckpoint& ckpt) const = 0;
  // Installs the weights and optimizer state of a checkpoint ValidateCheckpoint accepted.
  virtual void Install(const ShardCheckpoint& ckpt) = 0;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SHARD_STORAGE_H_
