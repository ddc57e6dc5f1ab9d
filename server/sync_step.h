// SyncStep: the SYNC rule of the ParameterStore (server/parameter_store.h), on its own. For the
// store's current step t it keeps each live worker's gradient (a whole push, or a partial push's
// parts) in the storages' GradientSlots, and once every live worker has pushed, has the storages
// sum the gradients with weights n_r / N in ascending rank order and apply the sum once.
//
//   push(t) from live worker r         stored; complete once it covers every part
//   the same push again (same id)      a retry whose answer was lost: OK, nothing stored
//   another push of (part of) step t   ALREADY_EXISTS
//   push(t - 1)                        OK, nothing stored: the step was applied before (another
//                                      server moved on first, or the workers recomputed it after a
//                                      membership change this server applied it before)
//   push of any other step             FAILED_PRECONDITION (unless a retry of the worker's latest)
//   every live worker complete         Push says kComplete; the store calls Apply(t):
//                                      sum_r (n_r / N) g_r over r with n_r > 0, ascending rank,
//                                      then one update per storage as update t; slots cleared
//   membership change, rollback        Drop: every slot cleared; then SetLive
//
// A push claiming more samples than a live worker's share of the global batch was never handed out
// and is refused (it would outweigh the others' gradients). The per-worker retry memory (the id and
// step of a worker's latest push) is the store's, for every mode; Push reads it and the store
// records the push once Push stored it.
//
// Cost: a worker's slots are allocated when it joins (the storages' whole gradient) and reused
// every step, so a step allocates nothing here.
//
// Thread safety: none; the ParameterStore calls it under its mutex.
#ifndef PSTRAIN_SERVER_SYNC_STEP_H_
#define PSTRAIN_SERVER_SYNC_STEP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "server/shard_storage.h"

namespace pstrain::server {

// A worker's latest push, for telling a retry (its answer was lost) from a new push. The store
// keeps one per live worker in every mode.
struct LastPush {
  bool known = false;
  int64_t step = 0;
  int32_t data_epoch = 0;  // ASYNC/SSP
  uint64_t request_id = 0;
};

// A SYNC step some live workers have pushed and others not yet (ParameterStore::Pending).
struct PendingStep {
  int64_t step = 0;
  // Since the step's first push arrived.
  absl::Duration waited;
  // Live workers whose push is missing, ascending.
  std::vector<int> missing;
  // A moving average (1/8 weight per step) of how long earlier steps waited from first to last
  // push; zero before the first step completed.
  absl::Duration typical;
};

class SyncStep {
 public:
  // `storages`: the store's list, borrowed for the SyncStep's life. `server_rank` names the server
  // in messages; `global_batch` bounds the samples of a step.
  SyncStep(int server_rank, int64_t global_batch, const std::vector<std::unique_ptr<ShardStorage>>* storages);

  // Makes `sorted_ranks` (ascending, distinct) the live workers: joiners get empty slots, leavers'
  // are freed, the others keep what they stored.
  void SetLive(const std::vector<int>& sorted_ranks);

  // What a push did.
  enum class Stored {
    kNothing,   // a retry, or a push of the step applied last: OK, nothing changed
    kStored,    // stored; the step still waits for other workers (or parts)
    kComplete,  // stored, and every live worker's gradient is complete: call Apply
  };
  // A push from live worker req.worker_rank() (checked by the caller) while the store is at
  // `step`, with `grads` its checked parts (one per storage; taken over when stored) and `last`
  // the worker's latest push. Errors (nothing changes): FAILED_PRECONDITION for another step,
  // ALREADY_EXISTS for (part of) the step pushed again under another id, INVALID_ARGUMENT for a
  // sample count above the worker's share or unlike an earlier part's.
  absl::StatusOr<Stored> Push(const PushRequest& req, int64_t step, const LastPush& last, StorageParts* grads);

  // What Apply did.
  struct Applied {
    int64_t samples = 0;            // sum n_r; 0: no update was made
    bool checkpoint_asked = false;  // a push of the step carried PushRequest.checkpoint
    absl::Duration waited;          // from the step's first push to its last
  };
  // Sums the complete step and applies it as update `step` (see above), then clears every slot.
  // REQUIRES: the last Push said kComplete.
  Applied Apply(int64_t step);

  // Forgets what is stored for the step (a membership change or a rollback voids it).
  void Drop();

  // Live workers whose gradient for the step is complete.
  int num_pushed() const { return num_pushed_; }

  // The pending step at `now` (the store is at `step`); nullopt when nothing is stored.
  std::optional<PendingStep> Pending(int64_t step, absl::Time now) const;

 private:
  // A live worker's gradient for the step.
  struct Contribution {
    // One slot per storage (made when the worker joins, reused every step). `pushed` once every
    // part is stored; partial pushes fill it part by part.
    bool pushed = false;
    int64_t samples = 0;
    std::vector<std::unique_ptr<GradientSlot>> slots;
    // Partial pushes: which parts are stored, how many, and the request ids that brought them
    // (for retries). `have` is allocated once, like the slots.
    std::vector<bool> have;
    int stored_parts = 0;
    absl::InlinedVector<uint64_t, 8> part_ids;
    // A push of the step asks for a checkpoint after it (PushRequest.checkpoint).
    bool wants_checkpoint = false;
  };

  Contribution NewContribution() const;
  absl::StatusOr<Stored> StorePart(const PushRequest& req, StorageParts* grads, Contribution& c);
  void StoreGradients(StorageParts* grads, Contribution& c) const;
  Stored Complete(Contribution& c);
  // The name of part `part` (the storages' parts in list order), for messages.
  std::string PartName(int part) const;

  const int server_rank_;
  const int64_t global_batch_;
  const std::vector<std::unique_ptr<ShardStorage>>& storages_;
  const int num_parts_;  // the storages' num_parts(): a whole push

  // The live workers by rank; std::map iterates in ascending rank, the summation order.
  std::map<int, Contribution> workers_;
  int num_pushed_ = 0;
  // When the step's first push arrived, and the moving average of the wait from first to last.
  absl::Time first_push_at_;
  absl::Duration typical_wait_;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SYNC_STEP_H_
