// The parameter server's core: the consistency protocol over this server's part of the model.
// No gRPC in here; server/ps_service.h adapts it to the ParameterServer service.
//
// Protocol and storage. This class keeps the protocol: membership epochs and fencing, request ids
// and de-duplication, data epochs and leased batches, parked requests, checkpoint cuts and replica
// behaviour. Each mode's rule is a piece of its own that it drives under its mutex: the SYNC step
// (server/sync_step.h: which workers' gradients a step sums, their weights n_r / N and the
// ascending-rank order) and the SSP clock gate (server/ssp_clocks.h); ASYNC applies each push as it
// comes. The values themselves (the dense chunks and the embedding-table rows, their optimizers,
// checking and decoding a request's part, a worker's stored SYNC gradient, the float work of the
// sum, updates with the scheduled learning rate, answers, checkpoint copy and restore) live in a
// list of ShardStorages (server/shard_storage.h: server::DenseShard, then server::SparseStorage),
// which this class owns and drives all alike, with no branch on their kind: their checking calls
// before taking its mutex, everything else under it.
//
// Requests that must wait (a SYNC pull for the step being aggregated, an SSP pull held back by the
// staleness bound) are parked, not blocked on: each call takes a `Done` callback that is invoked
// exactly once, either before the call returns or later from the thread of the request that
// released it (the push that completed the step, a FinishEpoch, Shutdown).
//
//   SYNC step t (live workers L at membership epoch E)   server step s
//   push(t) from each r in L    -> stored                  s == t
//   pull(t+1) / push_pull(t)    -> parked
//   last push(t) arrives        -> sum_r (n_r / sum n) g_r in ascending rank order, optimizer once,
//                                  s = t+1, parked requests answered with the new weights
//   UpdateMembership(E' > E)    -> stored pushes dropped, parked requests ABORTED; the workers of
//                                  E' recompute step t (the same global batch) and push again
//   push(t-1) from r in L       -> OK, answered with the weights of step t (another server moved
//                                  on first, or this one applied the step before the change)
//
// Membership. Worker ranks are stable identities, not 0..W-1: the live set is any set of distinct
// non-negative ranks. Every push and pull must come from a live worker and carry exactly the
// store's membership epoch; otherwise ABORTED (older: the worker's view is stale; newer: the
// server has not learnt the epoch yet, so the worker retries shortly).
//
// Modes (JobSpec.mode):
// - SYNC: as above. `step` in a request is the update number the worker computed on.
// - ASYNC: each push is applied on arrival (num_samples == 0: no update); pulls answer at once.
//   A push with a newer data_epoch starts that epoch.
// - SSP(K = JobSpec.staleness): pushes apply as in ASYNC and advance the pushing worker's clock in
//   the current data epoch; Pull(step = c) waits until every worker that has not finished the epoch
//   has clock >= c - K. A request with a newer data_epoch starts that epoch (all clocks 0). A
//   worker that joins mid-epoch starts at the smallest clock of the live workers still in the
//   epoch, so it holds nobody back more than the slowest worker already does. The clocks and the
//   gate are server/ssp_clocks.h; this class decides when they move.
//
// Leased batches (ASYNC/SSP). A push with lease_id != 0 is batch `lease_batch` of training lease
// `lease_id` in its data epoch, and each such batch is applied at most once. When a worker dies
// holding a lease, the scheduler hands its remainder to another worker, which pushes again the
// batches the dead one pushed but had not reported; a server that applied one already answers OK
// without applying it, so every batch is applied exactly once on every server:
//
//   push (e, L, b) not seen in data epoch e   -> applied, remembered
//   push (e, L, b) seen                       -> OK, not applied; SSP clock still advances (the
//                                                pushing worker did a step); PushPull answers like
//                                                Pull(step + 1), staleness wait included
//   push (e' < current data epoch, L, b)      -> OK, not applied, clock unchanged: an epoch begins
//                                                only when every batch of the one before has been
//                                                applied on every server
//   lease_id == 0                             -> no id (old callers, tests): never deduplicated
//
// The memory holds the current data epoch's batches only and is cleared when the next begins.
// A worker that finished the epoch (FinishEpoch) and then gets a remainder pushes as usual: its
// pushes are applied and it stays finished, so it still holds nobody back.
//
// Averaged tensors (TensorSpec.averaged, ModelDeclaration.averaged_tensors): their chunks are
// updated by plain SGD at lr 1 (constant, no momentum, no weight decay), whatever the job's
// optimizer; the workers push (value last pulled) - (local value) for them. So in SYNC, with every
// worker having pulled w, a step leaves w - sum_r (n_r / N)(w - b_r) = sum_r (n_r / N) b_r, the
// sample-weighted mean of the workers' values (exact up to float rounding); in ASYNC/SSP a push
// made right after pulling the current value sets the worker's own (the last push wins).
//
// Checkpoints (JobSpec.checkpoint_dir, checkpoint_every_steps = N > 0): the update that makes the
// step a multiple of N (SYNC: every server at the same step, so one step's files form a consistent
// cut; ASYNC/SSP: every N updates) copies weights and optimizer state under the lock; the public
// call that made it writes the file (server/checkpoint.h) after unlocking and answering its
// callbacks, so no request waits on the disk. Each server keeps its 2 newest files; a failed
// write is logged and does not fail the push.
//
// Cost: the SYNC aggregation and optimizer run on the thread of the push that completes the step,
// under the store's lock; buffers are allocated in Create and when a worker joins, so steady state
// allocates only the response messages and each request's small decoded parts (one per storage).
// Checks (shapes, keys, non-finite values) run before the lock is taken.
//
// Thread safety: every method may be called from any thread at the same time. `done` callbacks
// run outside the lock and may call back into the store.
#ifndef PSTRAIN_SERVER_PARAMETER_STORE_H_
#define PSTRAIN_SERVER_PARAMETER_STORE_H_

#include <atomic>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/payload_view.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "proto/scheduler.pb.h"
#include "server/async_step.h"
#include "server/checkpoint.h"
#include "server/checkpoint_cadence.h"
#include "server/server_metrics.h"
#include "server/shard_storage.h"
#include "server/ssp_clocks.h"
#include "server/sync_step.h"
#include "server/store_request.h"

namespace pstrain::server {

class ParameterStore {
 public:
  struct Options {
    // This server's rank; it owns the shard map's chunks with server_rank == rank.
    int rank = 0;
    // The job (defaults are applied again in Create, so a raw spec is fine). Uses mode, staleness,
    // optimizer, allow_nonfinite_gradients, seed, checkpoint_dir and checkpoint_every_steps.
    JobSpec job;
    ShardMap shard_map;
    // Workers in the initial view. Must be >= 1, and equal to worker_ranks.size() when that is set.
    int num_workers = 0;
    // The initial live worker ranks (ClusterView.workers), distinct and >= 0, in any order; empty
    // means 0..num_workers-1.
    std::vector<int> worker_ranks;
    // The initial membership epoch; requests must carry exactly the current one.
    int64_t membership_epoch = 0;
    // Updates the whole job makes (ClusterView.total_steps), for learning-rate schedules.
    int64_t total_steps = 0;
    // Optional: called with the step after each checkpoint file was written successfully (and the
    // older files pruned), from the thread of the request that wrote it, outside every lock of the
    // store. It runs on the push path, so it must not block (e.g. only set a flag).
    std::function<void(int64_t step)> on_checkpoint_written;
    // Optional: the oldest step the scheduler may still ask for (CheckpointAck.keep_from_step,
    // stored by the server's runner as answers arrive; shared by every store it builds). Pruning
    // then also keeps this step and every newer one: a cut the scheduler chose before this server
    // learnt of it stays on disk. Null: the keep rule alone (JobSpec.keep_checkpoints).
    std::shared_ptr<const std::atomic<int64_t>> keep_from;
    // Where the store records step waits and checkpoint writes (server/server_metrics.h); null
    // series are skipped. One observation per step or file, never per request.
    StoreMetrics metrics;
    // False for a replica (JobSpec.replicas = 2: the live copy of another server's shard, created
    // with rank = that shard): it writes no checkpoint files, since the files of the shard are its
    // primary's, until EnableCheckpoints (promotion).
    bool write_checkpoints = true;
    // The initial values of the whole model in the shard map's flat layout (TensorSpec.flat_offset;
    // the total of num_elements floats): an external model's declared values (GetInitialModel).
    // When set, each chunk copies its part of it instead of drawing model::FillInitialValues, and
    // so does the initial state a rollback to step 0 returns to. Shared, read only in Create.
    // Null: the built-in initialisation.
    std::shared_ptr<const std::vector<float>> initial_values;
  };

  // Called exactly once with the request's outcome; the response is filled only when OK.
  using Done = std::function<void(absl::Status)>;

  // Allocates and initialises this server's chunks (model::FillInitialValues with the job seed and
  // the tensor id, so the model does not depend on the number of servers; or Options::initial_values)
  // and one optimizer per chunk. INVALID_ARGUMENT for an invalid job, a shard map that is
  // inconsistent with its tensors, num_workers < 1, bad worker_ranks (negative, repeated, or not
  // num_workers of them), or initial_values of another size than the shard map's tensors. A server
  // that owns no chunk is valid (it answers with no chunks).
  static absl::StatusOr<std::unique_ptr<ParameterStore>> Create(const Options& options);

  // Shuts down first, so no parked `done` is left uncalled.
  ~ParameterStore();
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  // The three calls take their request as the transport decoded it (server/store_request.h: the
  // header and views of the payload, read before the call returns, also when the answer is
  // parked) and answer into a PullAnswer (borrowed until `done` runs). The forms taking a message
  // built in memory (its chunks and entries carry their data) view it with InMemoryPush /
  // InMemoryPull and answer into `resp` alone; they are for tests and tools.

  // Fills answer.resp with this server's chunks, sorted by (tensor_id, offset), and the server
  // step, and the rows of the request's embedding keys. PullRequest.rows_only: no chunks.
  // SYNC: step <= s answers now; step == s+1 parks until that update is applied; further ahead is
  // FAILED_PRECONDITION. A pull for step s-1, the step just applied, comes from a worker computing
  // it again after a membership change: its rows are read as they were before that update
  // (server/rows_before_update.h), so the recomputed gradient is the first try's; its chunks are
  // the current ones (that worker kept the step's dense weights). SSP: parks until the staleness bound holds. ASYNC:
  // answers now. Errors: INVALID_ARGUMENT (negative rank or step, bad keys), ABORTED (worker not live, membership epoch
  // other than the store's, or the membership changed while parked), FAILED_PRECONDITION (old data epoch, step too far
  // ahead), UNAVAILABLE (shutting down). answer.values, when set, needs room for num_elements() floats; the raw
  // transport (server/ps_service.h) sends them, and answer.rows, from there without another copy.
  void Pull(const DecodedPull& req, PullAnswer answer, Done done);
  void Pull(const PullRequest& req, PullResponse* resp, Done done);

  // Stores (SYNC) or applies (ASYNC/SSP) a gradient; `resp->step` is the server step afterwards.
  // The request is fully validated before anything changes; on error nothing changes.
  // A retry with the request id of the worker's latest push is answered OK and not applied again
  // (ASYNC/SSP: id 0 means "no id" and is never taken for a retry), so ids must be unique per
  // worker; in SYNC a second push for the same step with another id is ALREADY_EXISTS.
  // SYNC weights: n_r / sum n, summed in rank order whatever the arrival order; a worker with
  // n_r == 0 is left out of the sum; when sum n == 0 the step advances without an update.
  // ASYNC/SSP: num_samples == 0 applies nothing and does not count as an update (the SSP clock
  // still advances); a leased batch already applied is OK and applies nothing (see "Leased
  // batches" above).
  // SYNC: a push for the step just applied (server step - 1) is OK and changes nothing (see the
  // membership notes above); a push for any other step but the server's is FAILED_PRECONDITION
  // (unless it is a retry); the push that completes a step (every live worker pushed it) runs the
  // aggregation and the optimizer before `done` is called.
  // Errors: INVALID_ARGUMENT (negative rank, num_samples, step, lease_id, lease_batch, chunk layout
  // or size, bad keys or rows, non-finite value), ABORTED (worker not live, membership epoch other
  // than the store's), FAILED_PRECONDITION (wrong step, old data epoch), ALREADY_EXISTS (see
  // above), UNAVAILABLE (shutting down). The pull keys are checked too, though Push answers none.
  //
  // PushRequest.wait_until_applied (SYNC): the answer waits, like PushPull's, until this step is
  // applied (parked; ABORTED if the membership changes first), and carries only the step.
  void Push(const DecodedPush& req, PushResponse* resp, Done done);
  void Push(const PushRequest& req, PushResponse* resp, Done done);

  // Push, then answer like Pull(step + 1) with the pushed chunks and the rows of the pull keys:
  // SYNC with the weights after this step's update; a parked answer ends with ABORTED if the
  // membership changes before the step completes. answer.values, when set, needs room for the
  // floats of the pushed chunks (the answer covers the same chunks).
  void PushPull(const DecodedPush& req, PullAnswer answer, Done done);
  void PushPull(const PushRequest& req, PullResponse* resp, Done done);

  // The number of floats this server owns: the size of a whole answer.
  int64_t num_elements() const { return num_values_; }

  // SSP: worker `worker_rank` has no more pushes in `data_epoch`, so it no longer holds back other
  // workers' pulls. A newer data epoch starts that epoch first; an older one is a no-op (the epoch
  // is over anyway, so a retry stays harmless). Later pushes of the worker in the epoch (a
  // remainder of a dead worker's lease) are applied and leave it finished. SYNC and ASYNC: no-op.
  // INVALID_ARGUMENT for a negative rank; ABORTED when the worker is not live; UNAVAILABLE when
  // shutting down.
  absl::Status FinishEpoch(const FinishEpochRequest& req);

  // Installs membership epoch `epoch` with live workers `live_worker_ranks` (ClusterView.workers;
  // any order). OK and no change when `epoch` <= the current epoch. Otherwise, before answering:
  // - SYNC: the gradients stored for the unfinished step are dropped and every parked call
  //   (PushPull, Pull for the next step) ends with ABORTED "server <rank> moved to membership
  //   epoch <epoch> while step <s> was unfinished; recompute it";
  // - SSP: removed workers no longer hold back pulls (parked pulls are re-checked); a new worker
  //   starts at the smallest clock of the live workers still in the data epoch;
  // - every mode: workers that joined start with no retry memory; removed workers' state is freed.
  // Errors (nothing changes): INVALID_ARGUMENT for a negative or repeated rank, UNAVAILABLE when
  // shutting down. Does not block beyond the store's lock; allocates the gradient buffers of new
  // SYNC workers.
  absl::Status UpdateMembership(int64_t epoch, std::vector<int> live_worker_ranks);

  // The current membership epoch.
  int64_t membership_epoch() const;

  // The shard this store holds: the server rank whose chunks it owns (Options.rank).
  int rank() const { return rank_; }

  // A replica promoted to primary: from the next update on it writes checkpoints like a primary
  // (when the job checkpoints at all). Idempotent.
  void EnableCheckpoints();

  // Finishes every parked request with UNAVAILABLE "server <rank> shutting down"; later requests
  // get the same answer. Idempotent.
  void Shutdown();

  // Updates applied so far (SYNC: completed steps; ASYNC/SSP: pushes with samples applied, and
  // raised by CheckpointAt).
  int64_t step() const;

  // ASYNC: the quiet cut of a change of the server count (HeartbeatResponse.checkpoint_at_step;
  // docs/design/resharding.md). Raises the store's step to `step` and writes a checkpoint of it
  // now (a base or a delta, as the cadence says), so that every server of the map holds a
  // checkpoint of the same step while no update is in flight. OK, doing nothing, when the store
  // wrote this cut already. FAILED_PRECONDITION for a store that writes no checkpoints (no folder,
  // a copy), or one already past `step` (it applied an update since the scheduler looked: asked
  // again, higher); UNAVAILABLE once shut down or retired; INTERNAL when the write fails. Blocks on
  // disk I/O.
  absl::Status CheckpointAt(int64_t step) ABSL_LOCKS_EXCLUDED(mu_, write_mu_);

  // ASYNC/SSP: how far this store has applied the training leases of its data epoch, from lease
  // `first_lease_id` on, at most `max_leases` of them (HeartbeatRequest.applied_leases; see
  // server/applied_batches.h). Empty before any leased push.
  AppliedLeases AppliedLeasesFrom(int64_t first_lease_id, int max_leases) const;
  // The scheduler settled every lease below `lease_id` (HeartbeatResponse.leases_settled_below):
  // the store forgets them, and skips any later push of one as a repeat (server/applied_batches.h).
  void SettleLeasesBelow(int64_t lease_id);
  // Leases with a batch applied that are not settled yet (ASYNC/SSP; for tests).
  size_t num_unsettled_leases() const;

  // `callback` runs each time a leased batch is applied (not for a repeat), under the store's lock:
  // it must be quick and must not call the store. The server's runner sends its next heartbeat
  // sooner then, so that the scheduler learns a lease is complete without waiting a whole period.
  // Empty: none.
  void SetOnLeaseBatchApplied(std::function<void()> callback);

  // Requests parked now (SYNC pulls for the step being aggregated, SSP pulls held back by the
  // staleness bound, pushes waiting until applied). For metrics; takes the lock.
  int num_parked() const;

  // A SYNC step some live workers have pushed and others not yet (server/sync_step.h).
  using PendingStep = server::PendingStep;
  // The pending SYNC step at `now`; nullopt in other modes and when no push of the current step is
  // stored. For the server's slow-step watch (server/slow_step_watch.h).
  std::optional<PendingStep> Pending(absl::Time now) const;

  // This server's chunks, sorted by (tensor_id, offset), with their current values (data holds
  // length little-endian floats). For tests and checkpoints.
  std::vector<TensorChunk> Snapshot() const;

  // The shard map's version (its shard-map epoch) this store serves.
  int64_t shard_map_version() const { return shard_map_version_; }

  // Shutdown, and no checkpoint file is written from now on: a write in progress is waited for,
  // and one of a snapshot taken before is skipped. For a store replaced by one of another shard
  // map (the job changed its server count), whose steps after the restored cut are abandoned.
  void Retire();

  // Rows and bytes of each embedding table on this shard (empty without tables), for logs and the
  // run summary.
  std::vector<server::TableStats> TableStats() const;

  // A copy, taken under the lock, of everything a restarted server needs: step, weights and every
  // chunk optimizer's state vectors, with the layout fingerprint. Parked requests and gradients
  // stored for an unfinished SYNC step are not part of it (workers push them again). Always OK
  // today. Does not block on disk; copies the shard.
  absl::StatusOr<ShardCheckpoint> Checkpoint() const;

  // Installs the weights, optimizer state and step of `ckpt`, then answers parked pulls that the
  // new step satisfies; retry memory is cleared (pushes from before the restore are not retries);
  // the memory of applied leased batches is kept.
  // Mode and membership epoch in `ckpt` are informational and not compared. On error nothing
  // changes: FAILED_PRECONDITION when `ckpt` belongs to another server (rank), layout (chunk list,
  // fingerprint) or optimizer (state-vector count), or when a SYNC push is pending for the current
  // step; INVALID_ARGUMENT when `ckpt` is inconsistent in itself (vector sizes, negative step);
  // UNAVAILABLE when shutting down.
  absl::Status Restore(const ShardCheckpoint& ckpt);

  // Server recovery (SYNC with checkpoints; see DESIGN.md "Membership epochs and churn"): rolls
  // the store back to `ckpt` (nullptr: the initial state of step 0, kept since Create when
  // checkpoint_every_steps > 0) AND installs membership epoch `epoch` with `live_worker_ranks`, in
  // one step under the lock, so no push of the new epoch meets un-restored weights. `epoch` may
  // equal the current epoch (a store just created from the view that asks for the restore).
  // Unlike Restore, a pending SYNC step is dropped, not refused: its stored gradients are
  // forgotten and every parked call ends with ABORTED "server <rank> rolled back to step <C> at
  // membership epoch <epoch>; step <s> is void". Retry memory and the memory of applied leased
  // batches are cleared; SSP clocks are kept; workers join and leave as in UpdateMembership.
  // This server's checkpoint files of steps after the restored one are deleted (they belong to
  // the abandoned run), and a file of such a step still being written is not written.
  // Errors (nothing changes): INVALID_ARGUMENT for a negative or repeated rank or an inconsistent
  // `ckpt`; FAILED_PRECONDITION for a `ckpt` of another server, layout or optimizer (see Restore),
  // nullptr when no initial state was kept, or `epoch` older than the current one; UNAVAILABLE
  // when shutting down. Waits for a checkpoint write in progress (disk), never for a request.
  absl::Status RestoreAndUpdateMembership(const ShardCheckpoint* ckpt, int64_t epoch,
                                          std::vector<int> live_worker_ranks);

 private:
  // A request's parts, one per storage in list order (CheckGradient or CheckRead).
  using Parts = StorageParts;
  // A checkpoint's parts, one per storage (PrepareRestore).
  using PreparedParts = std::vector<std::unique_ptr<PreparedRestore>>;

  // What a pull answers with besides the step: the storages' read parts (empty: nothing, a push
  // waiting until applied) and where embedding rows go.
  struct PullAsk {
    // The first part the answer carries: a step's answers are run in this order (see Completion).
    int first_part = 0;
    Parts reads;
    OutgoingRowsAnswer* rows_out = nullptr;  // null: into resp->sparse
  };

  // A parked request, answered once `ready` holds.
  struct Waiter {
    int64_t step = 0;                   // SYNC: the update count to wait for; SSP: the clock c of Pull(step = c).
    int32_t data_epoch = 0;             // SSP only
    PullResponse* resp = nullptr;       // a pull's answer; nullptr for a push waiting until applied
    float* values = nullptr;            // where the answer's values go (nullptr: into resp's chunks)
    PushResponse* push_resp = nullptr;  // a push's answer (wait_until_applied): only the step
    Done done;
    PullAsk ask;
  };

  // A callback to run once the lock is released. Run answers in ascending `order` (stable):
  // answers with weights carry their first chunk, everything else -1, so a step's parts go back
  // first layer first whichever call released them.
  struct Completion {
    Done done;
    absl::Status status;
    int order = -1;
  };
  // Inline: a request usually completes itself and at most a few parked pulls, so no allocation.
  using Completions = absl::InlinedVector<Completion, 4>;

  ParameterStore(const Options& options, std::vector<int> worker_ranks,
                 std::vector<std::unique_ptr<ShardStorage>> storages);

  // Installs `epoch` and the live set `sorted_ranks` (UpdateMembership's bookkeeping, without
  // the SYNC drop of the pending step); returns " (joined [..], left [..])" for the log.
  std::string InstallMembershipLocked(int64_t epoch, const std::vector<int>& sorted_ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Sorts `ranks`; INVALID_ARGUMENT (prefixed with `what`) for a negative or repeated rank.
  static absl::Status CheckRanks(absl::string_view what, std::vector<int>* ranks);

  // JobSpec.max_grad_norm_per_sample: INVALID_ARGUMENT (and a count in the store's metrics) when
  // the L2 norm of the gradient part this push brings to this store (its `grads`, as the storages
  // count it: the dense chunks but the averaged tensors', and the embedding rows) is above the
  // limit. OK when the limit is off. With the limit on, it also refuses a push holding a value that
  // is not finite (unless the job allows them), with the storages' message naming the first.
  absl::Status CheckGradientNorm(absl::string_view what, const DecodedPush& push, const Parts& grads) const;
  // Checks everything that does not depend on mutable state; the caller holds no lock. Each
  // storage checks and decodes its part of the gradient into *grads and of the answer's ask
  // (PushRequest.pull_sparse, the pushed parts) into *reads, or of a pull's into *reads.
  absl::Status ValidatePush(const DecodedPush& push, Parts* grads, Parts* reads) const;
  absl::Status ValidatePull(const DecodedPull& pull, Parts* reads) const;
  // INVALID_ARGUMENT unless 0 <= data_epoch < the job's epochs; `what` names the request.
  absl::Status CheckDataEpoch(absl::string_view what, int32_t data_epoch) const;
  // ABORTED naming both versions when a request was routed under another shard map than this
  // store's (shard_map_version 0: accepted on a job's first map). Constant data: no lock.
  absl::Status CheckShardMap(absl::string_view what, int worker_rank, int64_t shard_map_version) const;
  // Checks shutdown, the shard-map epoch the request was routed under (CheckShardMap), the
  // membership epoch and that the worker is live.
  absl::Status CheckLive(absl::string_view what, int worker_rank, int64_t membership_epoch,
                         int64_t shard_map_version) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ABORTED "<what> rejected by server R: worker W is not a live member at membership epoch E".
  absl::Status NotLiveError(absl::string_view what, int worker_rank) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Push after validation; appends released waiters to `out`.
  // `grads`: the push's checked parts (SYNC stores them in the worker's slots until the step).
  absl::Status PushLocked(const PushRequest& req, Parts* grads, Completions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SYNC: has sync_ store the push, and applies the step when it is complete.
  absl::Status PushSyncLocked(const PushRequest& req, Parts* grads, Completions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PushAsyncLocked(const PushRequest& req, Parts* grads, Completions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers now, parks, or fails a pull that waits for `step` (see Waiter::step).
  // `push_resp` instead of `resp`: a push waiting until applied (only the step is answered).
  // `ask`: what the answer carries (a partial push's answer: its parts only).
  void PullLocked(int worker_rank, int64_t step, int32_t data_epoch, PullResponse* resp, float* values, Done done,
                  Completions* out, PushResponse* push_resp, PullAsk ask) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a push's answer carries: its parts (all for a whole push) and PushRequest.pull_sparse.
  static ReadAsk AskOf(const PushRequest& req, absl::Span<const IncomingRows> pull_sparse) {
    return req.partial() ? ReadAsk{req.first_chunk(), req.chunks_size(), pull_sparse} : ReadAsk{0, -1, pull_sparse};
  }

  // ASYNC/SSP: moves to `data_epoch` if it is newer (AsyncStep::EnterEpoch, then
  // NewDataEpochLocked); FAILED_PRECONDITION if it is older.
  absl::Status EnterDataEpochLocked(absl::string_view what, int worker_rank, int32_t data_epoch, Completions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A data epoch began (the request `what` from `worker_rank` brought it): the SSP clocks restart
  // and the pulls parked in the old epoch are answered.
  void NewDataEpochLocked(absl::string_view what, int worker_rank, Completions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyLocked(const Waiter& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Answers every parked waiter that is now ready.
  void ReleaseReadyLocked(Completions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // SYNC: applies the complete step (sync_.Apply), advances step_, snapshots when due and answers
  // the parked requests it releases.
  void ApplySyncStepLocked(Completions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills `resp` (and `values` and ask.rows_out, see PullAnswer) with what `ask` asks for, read as
  // before the last SYNC update when `before_last` (ShardStorage::ReadBeforeLastSum).
  void FillResponseLocked(PullResponse* resp, float* values, const PullAsk& ask, bool before_last) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Fills whichever answer a released waiter has.
  void FillWaiterLocked(const Waiter& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Checks a checkpoint against the constant layout and has each storage build what it installs
  // (PrepareRestore); the caller holds no lock. Nothing changes.
  absl::StatusOr<PreparedParts> PrepareCheckpoint(const ShardCheckpoint& ckpt) const;
  // A checkpoint of the store now: whole (base_step -1) or a delta on the cut of base_step.
  ShardCheckpoint CheckpointLocked(int64_t base_step = -1) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // After step_ advanced: takes a snapshot into due_checkpoint_ when a checkpoint is due: `asked`
  // (SYNC: a push of the step carried PushRequest.checkpoint), a multiple of checkpoint_every_
  // steps, or (ASYNC/SSP) checkpoint_interval_ passed since the last snapshot; then cuts
  // (ShardStorage::AfterCheckpointCut). A SYNC copy, which writes no file, cuts at the same steps.
  void MaybeSnapshotLocked(bool asked = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `ckpt` and prunes this server's older files; logs the outcome. Blocks on disk under
  // write_mu_ only, so pushes proceed meanwhile. Skips the write when a rollback happened since the
  // snapshot was taken (`rollbacks` is rollbacks_ at that time). Then calls on_checkpoint_written.
  // Returns whether the file was written.
  bool WriteCheckpointFile(const ShardCheckpoint& ckpt, int64_t rollbacks) ABSL_LOCKS_EXCLUDED(mu_, write_mu_);
  // The write and the pruning to the `keep` newest files; false (logged) when the write failed.
  bool WriteAndPruneLocked(const ShardCheckpoint& ckpt, size_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Installs the values and optimizer state (the storages) and step of a validated checkpoint.
  void InstallCheckpointLocked(const ShardCheckpoint& ckpt, PreparedParts prepared) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  static void Run(Completions* completions);
  // Whether this store writes checkpoints at all (a folder and a step or time interval).
  bool checkpoints_on() const {
    return !checkpoint_dir_.empty() && (checkpoint_every_ > 0 || checkpoint_interval_ > absl::ZeroDuration());
  }

  // Constant after construction.
  const int rank_;
  const Mode mode_;
  const bool allow_nonfinite_;
  // What the job can hand a worker: samples in one push (SYNC: the global batch, a single worker's
  // share at most; ASYNC/SSP: one lease batch) and data epochs. Pushes claiming more were never
  // handed out and are refused, so a forged sample count cannot outweigh the real ones.
  const int64_t max_samples_;
  const int32_t num_data_epochs_;
  // JobSpec.max_grad_norm_per_sample (0: off).
  const double max_grad_norm_;
  // Permission bits of the checkpoint files (JobSpec.output_mode).
  const mode_t output_mode_;
  // The values: the dense chunks, then the embedding-table rows. The list and the pointers are
  // constant; the storages are not thread-safe: their value calls are made only under mu_, their
  // layout and checking calls (constant data) also without it.
  const std::vector<std::unique_ptr<ShardStorage>> storages_;
  const int64_t num_values_;  // the storages' num_values(): the floats of a whole answer

  const std::string checkpoint_dir_;
  const size_t keep_checkpoints_;   // the newest cuts kept restorable (JobSpec.keep_checkpoints)
  const int64_t checkpoint_every_;  // 0: no checkpoints every N steps
  // JobSpec.checkpoint_every_seconds; zero: none by time. SYNC: asked for by the workers' pushes;
  // ASYNC/SSP: measured here from last_snapshot_.
  const absl::Duration checkpoint_interval_;
  const std::function<void(int64_t)> on_checkpoint_written_;
  const std::shared_ptr<const std::atomic<int64_t>> keep_from_;  // may be null: Options::keep_from
  const StoreMetrics metrics_;
  // The state at creation (step 0), for a rollback to "no checkpoint"; kept only when
  // checkpointing (checkpoints_on()). Set in the constructor, constant afterwards.
  std::unique_ptr<const ShardCheckpoint> initial_;

  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // The quiet cut CheckpointAt wrote last; -1: none.
  int64_t quiet_cut_ ABSL_GUARDED_BY(mu_) = -1;
  // Options.write_checkpoints, until EnableCheckpoints.
  bool writes_checkpoints_ ABSL_GUARDED_BY(mu_) = true;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t membership_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // The shard map's version (its shard-map epoch) this store serves: Options::shard_map's.
  const int64_t shard_map_version_;
  // The live workers by rank, with their latest push (retry memory, every mode).
  std::map<int, LastPush> workers_ ABSL_GUARDED_BY(mu_);
  // SYNC: the gradients stored for step_ and the rank-ordered weighted sum (unused otherwise).
  SyncStep sync_ ABSL_GUARDED_BY(mu_);
  // SSP: the live workers' clocks in the current data epoch and the staleness gate
  // (JobSpec.staleness).
  SspClocks ssp_ ABSL_GUARDED_BY(mu_);
  // ASYNC/SSP: which pushes apply: the current data epoch (SSP: the workers' clocks count pushes
  // in it) and the leased batches applied in it.
  AsyncStep async_ ABSL_GUARDED_BY(mu_);
  // Called under mu_ each time a leased batch is applied (SetOnLeaseBatchApplied).
  std::function<void()> on_lease_batch_applied_ ABSL_GUARDED_BY(mu_);
  // A snapshot due for writing: set by the update that made it due, taken by the same public call
  // before it unlocks, so it is empty whenever mu_ is free.
  std::optional<ShardCheckpoint> due_checkpoint_ ABSL_GUARDED_BY(mu_);
  // When the latest snapshot was taken (creation before the first), for checkpoint_interval_.
  absl::Time last_snapshot_ ABSL_GUARDED_BY(mu_);
  // Which cuts write a whole shard and which a delta (JobSpec.full_checkpoint_every): Plan and
  // Restored under mu_, Written (an atomic) under write_mu_ only.
  CheckpointCadence cadence_;
  // Rollbacks (RestoreAndUpdateMembership) so far; changed under write_mu_ and mu_ together.
  std::atomic<int64_t> rollbacks_{0};

  // Serializes checkpoint writes and pruning (concurrent pushes may each have one to write).
  // Lock order: write_mu_ before mu_ (only RestoreAndUpdateMembership holds both); the writes
  // themselves never hold mu_.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_PARAMETER_STORE_H_
