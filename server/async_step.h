// AsyncStep: the ASYNC/SSP rule of the ParameterStore (server/parameter_store.h) for which pushes
// apply, on its own, beside SyncStep (the SYNC step) and SspClocks (the SSP gate). It keeps the
// store's data epoch and the leased batches applied in it (server/applied_batches.h). A push that
// passed the store's checks, and is not a retry of the worker's latest (the store's per-worker
// retry memory answers those first), is one of:
//
//   a leased batch of a data epoch that ended   a repeat: skipped (a data epoch begins only once
//                                               every lease of the one before is complete, i.e.
//                                               each of its batches was applied on every server)
//   a push of a newer data epoch                the epoch begins first (its applied batches
//                                               forgotten); SSP: for a push of any epoch
//   SSP: an unleased push of an older epoch     FAILED_PRECONDITION, nothing changes
//   a leased batch applied in this epoch        a repeat: skipped (the rest of a dead worker's
//   already                                     lease, pushed again)
//   otherwise                                   applied, as the store's next update
//
// A pull and a worker's FinishEpoch move the epoch too in SSP (EnterEpoch). What a new epoch means
// for the SSP clocks and the parked pulls is the store's (AsyncStep::Verdict.new_epoch).
//
// Thread safety: none; the ParameterStore calls it under its mutex.
#ifndef PSTRAIN_SERVER_ASYNC_STEP_H_
#define PSTRAIN_SERVER_ASYNC_STEP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps.pb.h"
#include "proto/scheduler.pb.h"
#include "server/applied_batches.h"

namespace pstrain::server {

class AsyncStep {
 public:
  // For server `server_rank` (named in errors); `ssp`: every push enters its data epoch, not only
  // a leased one of a newer epoch.
  AsyncStep(int server_rank, bool ssp) : server_rank_(server_rank), ssp_(ssp) {}

  struct Verdict {
    bool new_epoch = false;    // the push's data epoch began with it
    bool ended_epoch = false;  // a leased batch of an epoch that ended (SSP clocks: not counted)
    bool apply = false;        // false: a repeat, skipped
  };
  // Decides for push `req` (see above) and records its leased batch as applied when it applies.
  absl::StatusOr<Verdict> Push(const PushRequest& req);

  // Moves to `data_epoch` when it is newer (true; the applied batches forgotten), stays when it is
  // the current one (false); FAILED_PRECONDITION when it is older: "<what> from worker W for data
  // epoch E: server S is already in data epoch D".
  absl::StatusOr<bool> EnterEpoch(absl::string_view what, int worker_rank, int32_t data_epoch);

  // The current data epoch (0 at first).
  int32_t data_epoch() const { return data_epoch_; }
  // Forgets the applied batches (a rollback to a checkpoint); the epoch stays.
  void ForgetBatches() { applied_.Clear(); }
  // The scheduler's watermark: every lease below `lease_id` is settled (AppliedBatches::SettleBelow).
  void SettleLeasesBelow(int64_t lease_id) { applied_.SettleBelow(lease_id); }
  // Leases with a batch applied that are not settled yet.
  size_t num_unsettled_leases() const { return applied_.num_leases(); }
  // The server's confirmation of its applied leases (AppliedBatches::Report) from
  // `first_lease_id` on, at most `max_leases`; empty when no batch of the epoch is applied.
  AppliedLeases AppliedFrom(int64_t first_lease_id, int max_leases) const;

 private:
  const int server_rank_;
  const bool ssp_;
  int32_t data_epoch_ = 0;
  // The (lease_id, lease_batch) pairs applied in data_epoch_.
  AppliedBatches applied_;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_ASYNC_STEP_H_
