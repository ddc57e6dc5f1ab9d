// Runs one parameter server for the length of a job:
//
//   listen on host:port  ->  Register(SERVER)  ->  WaitUntilRunning  ->  build the store from the
//   view, serve it  ->  Barrier("servers-ready")  ->  heartbeat until the job ends  ->  shut down
//
// While serving, a membership thread keeps the store's live workers current: when a heartbeat
// answer carries a newer membership epoch (or, as a fallback, every heartbeat interval while the
// heartbeats' epoch is ahead of the store's) it fetches the cluster view and calls
// ParameterStore::UpdateMembership. It also refreshes once right after the store is built, since
// workers may have left or joined during start-up.
//
// Server recovery (SYNC with checkpoints): the server reports its checkpoint steps to the
// scheduler after registering and after every checkpoint it writes (from the membership thread,
// never the push path). When a view's restore_epoch is newer than the store's epoch, the server
// rolls back to view.restore_step (ParameterStore::RestoreAndUpdateMembership) instead of a
// plain membership update; a replacement server, whose first view already asks for a restore,
// rolls back before it serves anything. A rollback that cannot be done fails the job.
//
// Replicas (JobSpec.replicas = 2): the server also holds a live copy of shard (rank - 1) mod S in a
// second store, fed by the workers' backup pushes and kept at the same membership epoch. When the
// view's shard_hosts names this server primary of that shard (its server died), the copy is
// promoted: it writes checkpoints from then on. A server whose registration is refused with
// ALREADY_EXISTS (it replaces a dead server whose shards are served by promoted copies) is not
// needed: Run logs it and returns OK. A change of the server count replaces the copy too: the
// copy of the shard before this one under the new map, restored from the same cut (Reshard).
//
// The final model (a job with a final_model_path): once every worker is done, the scheduler's
// heartbeat answers list the shards it wants from this server (HeartbeatResponse
// .send_final_shards: those this server is the primary of); the membership thread sends each
// one's chunks with their current values (SubmitFinalShard): its own store's, or its promoted
// copy's. A shard the scheduler refuses as malformed (INVALID_ARGUMENT, e.g. a non-finite weight)
// fails the job; any other failure is tried again when the next answer asks again.
//
// Health (grpc.health.v1, transport/health.h) on the same port, and on the separate plaintext health
// port if any (health_port, which a probe can reach when the main port demands TLS): NOT_SERVING
// until the servers-ready barrier (registered, shard ready), SERVING while the job runs,
// NOT_SERVING once it has ended.
// A server that registers after the job FINISHED (an orchestrator restarted it) returns OK at
// once; after the job FAILED, the scheduler's ABORTED.
//
// The gRPC server starts first (answering UNAVAILABLE until the store exists) because its address
// is what the server registers with.
//
// Thread safety: Run is called once, from one thread; Stop may be called from any thread at any
// time, before, during or after Run.
#ifndef PSTRAIN_SERVER_SERVER_RUNNER_H_
#define PSTRAIN_SERVER_SERVER_RUNNER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/resource_quota.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/client/scheduler_client.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler.pb.h"
#include "server/parameter_store.h"
#include "server/ps_service.h"
#include "server/server_metrics.h"
#include "server/shard_transfer_service.h"
#include "server/table_reshard.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace pstrain {
class HealthServer;
}  // namespace pstrain

namespace pstrain::server {

class ServerRunner {
 public:
  struct Options {
    // host:port of the scheduler. Required.
    std::string scheduler_address;
    // Where this server's ParameterServer service listens; port 0 picks a free port.
    std::string host = "127.0.0.1";
    int port = 0;
    // The host the server registers with the scheduler, i.e. where workers dial it (with the
    // port it listens on); empty: `host`. Needed when `host` listens everywhere (0.0.0.0, ::).
    std::string advertise_host;
    // Also serve on a unix domain socket in this folder (pstrain-server-<pid>/ps.sock, inside a
    // folder of its own only this user may enter), which workers on the same host dial instead of
    // TCP (LocalEndpoint, common/host_id.h). With TLS configured the socket uses local credentials
    // instead: no encryption, the job token and session checks unchanged
    // (transport/transport_security.h). Empty: TCP only. A folder that cannot take the socket is
    // logged and skipped, not an error.
    std::string unix_socket_dir;
    // Deadline of each ordinary scheduler rpc.
    absl::Duration rpc_timeout = absl::Seconds(30);
    // Bound on each startup phase: registering, waiting for every role, the servers-ready barrier.
    absl::Duration startup_timeout = absl::Minutes(2);
    // With health_port > 0, a plaintext listener on health_host:health_port serving only
    // grpc.health.v1.Health, with the main port's status (transport/health.h HealthServer). 0: none.
    std::string health_host = "0.0.0.0";
    int health_port = 0;
    // How the listener and the channel to the scheduler are secured (transport/transport_security.h);
    // null: plaintext on loopback only.
    std::shared_ptr<const TransportSecurity> security;
    // Where the server's Prometheus series go (server/server_metrics.h); borrowed, must outlive
    // Run. Null: a private set nobody scrapes. Run sets the registry's constant labels (role,
    // rank) once it is registered.
    ServerMetrics* metrics = nullptr;
    // The port the process serves those metrics on (0: none), registered with the scheduler as
    // metrics_host:metrics_port; a host that listens everywhere (empty, 0.0.0.0, ::) is replaced
    // by the host the server registers with.
    int metrics_port = 0;
    std::string metrics_host;
    // A Stop while the job runs drains this server instead of stopping it (pstrain-server
    // --drain_on_stop): it asks the scheduler to leave (SchedulerApi::Leave), which plans the
    // scale-down to one server fewer, keeps serving until the cut-over drops it from the map, and
    // returns OK then. A refused request (not the highest rank, not a SYNC job with checkpoints,
    // another change pending, ...) is logged and the server stops as without this option; so does
    // a second Stop, or drain_timeout passing first. For orchestrators that stop the highest
    // server when its set shrinks (a Kubernetes StatefulSet).
    bool drain_on_stop = false;
    absl::Duration drain_timeout = absl::Minutes(10);
    // This server's checkpoint folder instead of the job's (JobSpec.checkpoint_dir), as a
    // Kubernetes pod's own volume is: empty, the job's. A change of the server count then fetches
    // the parts of the old ranks' checkpoints it does not hold from their servers (ShardTransfer),
    // and, drained, this server stays until every server of the new map has restored, serving
    // its own. (A server of the map that dies before the new map's first cut is then recovered
    // from the change's cut, which needs the drained servers' files: not possible once they left.)
    std::string checkpoint_dir;
  };

  // INVALID_ARGUMENT for an empty scheduler address or host, a port or health_port outside
  // [0, 65535] or a timeout <= 0 (drain_timeout: with drain_on_stop).
  static absl::StatusOr<std::unique_ptr<ServerRunner>> Create(const Options& options);

  ServerRunner(const ServerRunner&) = delete;
  ServerRunner& operator=(const ServerRunner&) = delete;

  // Blocks until the job ends. OK when it FINISHED or Stop was called; ABORTED when the job failed;
  // UNAVAILABLE when the port or the health port cannot be bound or the scheduler was lost; DEADLINE_EXCEEDED when a
  // startup phase timed out; other errors from building the store, which are also reported to the
  // scheduler so the job fails at once. Stop during startup is noticed within a few seconds,
  // except during the servers-ready barrier (bounded by startup_timeout).
  absl::Status Run();

  // Makes Run return OK soon, or, with drain_on_stop while the job runs, starts the drain (a
  // second call stops). Does no work itself, so a signal-handling thread may call it.
  void Stop();

  // The port the service listens on once Run has bound it; 0 before. For tests.
  int port() const;

 private:
  explicit ServerRunner(const Options& options) : options_(options) {}

  // Everything between binding the port and the end of the job. Registers `address` and `local`
  // (its unix socket, if any). Leaves the store it serves in store_, so Run can shut it down
  // before the gRPC server.
  absl::Status ServeJob(SchedulerClient* client, const std::string& address, const LocalEndpoint& local,
                        ParameterServerService* service);
  // The store this server serves its shard from now (null before ServeJob built it).
  std::shared_ptr<ParameterStore> CurrentStore() const;
  // Replicas: the copy this server holds now (null without replicas, or before ServeJob built it).
  std::shared_ptr<ParameterStore> CurrentReplica() const;
  // Replicas: a store for the copy of the shard before `rank`'s among `servers` servers, from the
  // own store's options; it writes no checkpoints until promoted. A failure is reported (the job
  // fails) and returned.
  absl::StatusOr<std::shared_ptr<ParameterStore>> CreateReplica(SchedulerClient* client, int rank, int servers,
                                                                ParameterStore::Options options);
  // The options of this server's store under `view`'s shard map, for `job` (the registration's).
  ParameterStore::Options StoreOptions(const JobSpec& job, const ClusterView& view, int rank);
  // The job's bounds on requests to the shards `hosted` of `map` (store_job: a store's job).
  static RequestLimits LimitsFor(const JobSpec& store_job, const ShardMap& map, const std::vector<int>& hosted);
  // The view publishes another shard map (the job changed its server count at the cut of
  // view.restore_step, docs/design/resharding.md). The old store is retired; a server the new map
  // still has builds a store of it (with replicas, and one for its copy of the shard before it under
  // the new map), restores the cut re-sharded (RollBack) and serves it; a drained one leaves the
  // job and ends Run with OK. A failure is reported (the job fails) and
  // returned.
  absl::Status Reshard(SchedulerClient* client, ParameterServerService* service, int rank,
                       const std::string& checkpoint_dir, const ClusterView& view);
  // The unix socket to serve on (stale file removed), or "" for none (see Options).
  std::string UnixSocketPath() const;

  // The membership thread: until the job ends or Stop, brings `store` to the membership epoch the
  // heartbeats report, and reports this server's checkpoint list to the scheduler whenever it
  // changed (checkpoint_dir empty: checkpointing is off, nothing to report), and hands freed
  // memory back to the system whenever it finds more than `kept_freed_bound` bytes of it resident
  // (FreedMemoryBound). A failed rollback ends the job with its error. The pointers are borrowed
  // for the thread's lifetime.
  void FollowMembership(SchedulerClient* client, ParameterServerService* service, Heartbeater* heartbeater, int rank,
                        const std::string& checkpoint_dir, absl::Duration poll, int64_t kept_freed_bound);
  // Fetches the view and installs its epoch and live workers, rolling back first (RollBack) when
  // the view carries a recovery newer than the store's epoch. Logs and ignores a failed fetch (the
  // membership thread tries again, and a lost scheduler ends the job through the heartbeats);
  // returns only a failed rollback, which is reported to the scheduler already.
  // A view of another shard map goes to Reshard instead.
  absl::Status RefreshMembership(SchedulerClient* client, ParameterServerService* service, int rank,
                                 const std::string& checkpoint_dir, ParameterStore* store);
  // Server recovery: reads this server's checkpoint of `step` (SYNC: view.restore_step(); ASYNC/SSP
  // replacement: RegisterResponse.restore_own_step; step 0 without a file: the initial state) and
  // installs it with the view's epoch and workers in one store call. A missing or corrupt file
  // (step > 0) or a refused checkpoint is reported to the scheduler, which fails the job, and
  // returned.
  // With a copy of another shard (`replica`, may be null) and a SYNC restore (the view's restore
  // step), the copy goes back to the same step too, from its shard's files. A re-cut of a cut of
  // another server count adds what `store`'s shard got to *counts (may be null).
  absl::Status RollBack(SchedulerClient* client, int rank, const std::string& checkpoint_dir, int64_t step,
                        const ClusterView& view, ParameterStore* store, ParameterStore* replica,
                        ReshardCounts* counts = nullptr);
  // RollBack's work for one store: the checkpoint of `step` of the shard `store` holds (its chain;
  // or, given `cut`, a cut of another server count read by RollBack, re-cut:
  // ClusterView.restore_servers), installed with the view's epoch and workers. Failures as
  // RollBack's.
  // `cut` holds each old rank's whole checkpoint as this server's folder has it, or nothing where
  // the folder lacks it: that rank's part for the store's shard is then fetched from the old
  // server itself (FetchPart).
  absl::Status RestoreStore(SchedulerClient* client, int rank, const std::string& checkpoint_dir, int64_t step,
                            const ClusterView& view, const std::vector<std::optional<ShardCheckpoint>>* cut,
                            ParameterStore* store, ReshardCounts* counts);
  // Old server `from`'s part of its checkpoint of `step` for shard `shard` of the view's map, over
  // the network (server/shard_transfer_service.h), retried while that server answers UNAVAILABLE
  // (it has not seen the new map yet) for up to startup_timeout. NOT_FOUND when the view lists no
  // server `from`.
  absl::StatusOr<ShardCheckpoint> FetchPart(SchedulerClient* client, int from, int64_t step, const ClusterView& view,
                                            int shard);
  // Sends the final shards `shards` (each hosted here as primary: this server's own, or its
  // promoted copy's) to the scheduler; see "The final model" above. Returns only an error that
  // fails the job (reported to the scheduler already).
  absl::Status SendFinalShards(SchedulerClient* client, int rank, const ParameterStore& store,
                               const std::vector<int>& shards);
  // Sends ListCheckpointSteps(checkpoint_dir, rank); logs a failure. On OK, the answer's oldest
  // step the scheduler may still ask for goes to keep_from_.
  absl::Status ReportCheckpoints(SchedulerClient* client, int rank, const std::string& checkpoint_dir);
  // Reports `status` to the scheduler as this server's failure (the job fails) and returns it.
  static absl::Status ReportFatal(SchedulerClient* client, int rank, absl::Status status);
  // A checkpoint was written or removed (any thread; never blocks beyond mu_).
  void NoteCheckpointsChanged();

  // The end of the job, as reported by the heartbeat thread.
  void EndJob(absl::Status status);
  // A heartbeat answer carried membership epoch `epoch` (heartbeat thread).
  void NoteMembershipEpoch(int64_t epoch);
  // A heartbeat answer asked for final shards (heartbeat thread).
  void NoteFinalShardsWanted(const HeartbeatResponse& answer);
  // A heartbeat answer asked for the quiet cut of `step` (ASYNC; heartbeat thread; 0: none).
  void NoteQuietCutWanted(int64_t step);
  // Writes the quiet cut of `step` from `store` (membership thread; HeartbeatResponse
  // .checkpoint_at_step): logged, and on failure tried again at the next answer that asks.
  void WriteQuietCut(ParameterStore* store, int64_t step);
  bool stopped() const;
  // The heartbeats ended the job for this server with UNAVAILABLE: no scheduler answered for the
  // give-up time.
  bool SchedulerLost() const;
  bool StoppedOrEnded() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_requested_ || job_ended_; }
  // A heartbeat answer said every server of the map serves restore epoch `epoch` (heartbeat
  // thread; 0: not all).
  void NoteMapRestored(int64_t epoch);
  bool StoppedEndedOrDrainWanted() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return StoppedOrEnded() || drain_wanted_; }
  // Serves until the job ends or Stop, draining this server first when drain_on_stop asks.
  void WaitForTheEnd(SchedulerClient* client, int rank);

  const Options options_;
  // The server-to-server service on the port (parts of this server's cuts); set by Run.
  ShardTransferService* transfer_ = nullptr;
  // Options::metrics, or Run's own; set at the start of Run.
  ServerMetrics* metrics_ = nullptr;

  // What gRPC may hold for the main port at once, read buffers and requests in flight (a receive
  // limit alone bounds nothing: gRPC reads a request in full before comparing it). Made by Run
  // before listening, with room for a few requests; resized by ServeJob once the job's bound on
  // bytes in flight is known (ListenerQuotaBytes in server_runner.cc). Past it gRPC resets calls,
  // which workers retry.
  std::unique_ptr<grpc::ResourceQuota> listener_quota_;

  // JobSpec.num_servers: the job's first server count (the count of a shard map that does not
  // say). Set by ServeJob before any rollback, with the job as registered.
  int job_servers_ = 0;
  JobSpec job_;
  // An external model's declared values (null: the built-in initialisation), for every store.
  std::shared_ptr<const std::vector<float>> initial_values_;
  std::atomic<bool> replica_promoted_{false};

  // The oldest step the scheduler may still ask for (CheckpointAck.keep_from_step), which every
  // store this runner builds keeps on disk; 0 (keep every file) until the first answer says.
  const std::shared_ptr<std::atomic<int64_t>> keep_from_ = std::make_shared<std::atomic<int64_t>>(0);
  mutable absl::Mutex mu_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  // drain_on_stop: Stop may drain (the job runs and serves: WaitForTheEnd), and Stop asked to.
  bool may_drain_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_wanted_ ABSL_GUARDED_BY(mu_) = false;
  // The newest restore epoch every server of the map serves (HeartbeatResponse.map_restored_epoch).
  int64_t map_restored_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // The store serving this server's shard; replaced when the job changes its server count.
  std::shared_ptr<ParameterStore> store_ ABSL_GUARDED_BY(mu_);
  // Replicas: the copy of the shard before this server's. Set by ServeJob before serving; replaced
  // with store_ when the job changes its server count.
  std::shared_ptr<ParameterStore> replica_ ABSL_GUARDED_BY(mu_);
  // What the last change of the server count cost this server (Reshard), for every heartbeat
  // from then on (HeartbeatRequest.resharded).
  std::optional<ReshardReport> resharded_ ABSL_GUARDED_BY(mu_);
  bool job_ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status job_status_ ABSL_GUARDED_BY(mu_);
  int port_ ABSL_GUARDED_BY(mu_) = 0;
  // The gRPC server and the health listener (null if none) while Run serves, for their health
  // status; null before and after.
  grpc::Server* grpc_server_ ABSL_GUARDED_BY(mu_) = nullptr;
  HealthServer* health_listener_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The newest membership epoch a heartbeat answer announced.
  int64_t membership_hint_ ABSL_GUARDED_BY(mu_) = 0;
  // This server's checkpoint files changed since the membership thread last reported them.
  bool checkpoints_changed_ ABSL_GUARDED_BY(mu_) = false;
  // The final shards the latest heartbeat answer asked for, not yet taken by the membership thread.
  std::vector<int> final_shards_wanted_ ABSL_GUARDED_BY(mu_);
  // The quiet cut the latest heartbeat answer asked for (0: none), and the one written last.
  int64_t quiet_cut_wanted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t quiet_cut_written_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SERVER_RUNNER_H_
