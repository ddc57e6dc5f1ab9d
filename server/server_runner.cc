#include "server/server_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/cleanup/cleanup.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/barriers.h"
#include "transport/health.h"
#include "common/host_id.h"
#include "common/job_spec.h"
#include "common/malloc_tuning.h"
#include "common/metrics_endpoint.h"
#include "common/server_counts.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/build_fingerprint.h"
#include "model/model_file.h"
#include "server/applied_batches.h"
#include "server/checkpoint.h"
#include "server/checkpoint_chain.h"
#include "server/checkpoint_reshard.h"
#include "server/shard_transfer_service.h"
#include "server/slow_step_watch.h"
#include "common/listen_error.h"

namespace pstrain::server {
namespace {

// Whether the view lists this server: rank `rank` at `address` (after a cancelled change, another
// server may take the rank later).
bool ListsServer(const ClusterView& view, int rank, const std::string& address) {
  for (const ServerInfo& server : view.servers()) {
    if (server.rank() == rank && server.address() == address) return true;
  }
  return false;
}

// What this server confirms to the scheduler: its own shard's applied leases, and with a copy of
// another shard, only what both stores applied.
AppliedLeases AppliedLeasesOf(const ParameterStore& primary, const ParameterStore* replica, int64_t from) {
  AppliedLeases own = primary.AppliedLeasesFrom(from, kMaxReportedLeases);
  if (replica == nullptr) return own;
  return AppliedOnBoth(own, replica->AppliedLeasesFrom(from, kMaxReportedLeases));
}

// The store's rows per table, for the scheduler's run summary.
// What a re-cut for shard map `version` cost this server (HeartbeatRequest.resharded).
ReshardReport ReshardReportOf(int64_t version, absl::Duration pause, const ReshardCounts& counts) {
  ReshardReport report;
  report.set_shard_map_version(version);
  report.set_pause_ms(absl::ToInt64Milliseconds(pause));
  report.set_rows(counts.rows);
  report.set_rows_moved(counts.rows_moved);
  report.set_bytes(counts.bytes);
  report.set_bytes_moved(counts.bytes_moved);
  return report;
}

void AddTableUsage(const ParameterStore& store, bool replica, HeartbeatRequest* request) {
  for (const TableStats& t : store.TableStats()) {
    TableUsage* usage = request->add_tables();
    usage->set_table(t.name);
    usage->set_shard(store.rank());
    usage->set_replica(replica);
    usage->set_rows(t.rows);
    usage->set_bytes(t.bytes_used);
    usage->set_floor_bytes(t.rows * t.floor_bytes_per_row);
    usage->set_admitted(t.admitted);
    usage->set_refused(t.refused);
    usage->set_evicted(t.evicted);
    usage->set_tombstones(t.tombstones);
  }
}

// "shard 0: embedding rows C1 812, C2 790, ...; 40123 rows in 6.1 MiB, 159.2 bytes/row (floor 128)".
void LogTableStats(const ParameterStore& store) {
  const std::vector<TableStats> stats = store.TableStats();
  if (stats.empty()) return;
  int64_t rows = 0, bytes = 0, floor = 0, refused = 0, evicted = 0;
  std::vector<std::string> parts;
  for (const TableStats& t : stats) {
    parts.push_back(absl::StrCat(t.name, " ", t.rows));
    rows += t.rows;
    bytes += t.bytes_used;
    floor += t.rows * t.floor_bytes_per_row;
    refused += t.refused;
    evicted += t.evicted;
  }
  LOG(INFO) << "server: shard " << store.rank() << ": embedding rows " << absl::StrJoin(parts, ", ") << "; " << rows
            << " rows in " << absl::StrFormat("%.1f", bytes / 1048576.0) << " MiB, "
            << absl::StrFormat("%.1f bytes/row (floor %.1f)", rows > 0 ? double(bytes) / rows : 0.0,
                               rows > 0 ? double(floor) / rows : 0.0)
            << (refused > 0 ? absl::StrCat("; ", refused, " updates of keys not admitted dropped") : "")
            << (evicted > 0 ? absl::StrCat("; ", evicted, " rows evicted") : "");
}

// A server's pull answer holds its whole share of the model; keep gRPC's 4 MiB default out of the way.
constexpr int kMaxMessageBytes = 1 << 30;
// The main port's memory quota (ServerRunner::listener_quota_) beyond what the job's calls need:
// room to read a few oversize requests in full, so that they get the server's precise refusal
// (INVALID_ARGUMENT naming the job's limit) rather than a reset. Also the whole quota until the job
// is known: nothing of the job's arrives before registration.
constexpr size_t kOversizeRoomBytes = 256 << 20;

// The main port's memory quota for a job: twice the bytes in flight it allows (what the workers'
// calls may make gRPC hold before the server admits or refuses them, retries included) and
// kOversizeRoomBytes.
size_t ListenerQuotaBytes(const RequestLimits& limits) {
  return static_cast<size_t>(2 * limits.max_inflight_bytes) + kOversizeRoomBytes;
}

// The membership thread hands freed memory back each poll that finds more of it resident than the
// job's usual request (KeptFreedBoundBytes), and at least this much.
constexpr int64_t kMinKeptFreedBytes = 1 << 20;

// The freed memory the server keeps for reuse between two polls of the membership thread: what
// gRPC freed of the calls it read (refused ones included: gRPC reads a request in full before a
// handler runs), a checkpoint's snapshot once written, and the heap's fragments. One usual
// request's worth: keeping freed memory is for speed (common/malloc_tuning.h), and more than a
// request of it only grows the process. Handing it back costs page faults when reused, at most
// once a poll rather than on every call. Not the largest request: a sparse job's allows for 64
// keys per sample per table, 75 times what a CTR job sends, and a server then kept every
// checkpoint's snapshot (a copy of its tables) resident: 2.8 times its RSS.
int64_t KeptFreedBoundBytes(const RequestLimits& limits) {
  return std::max(kMinKeptFreedBytes, limits.typical_request_bytes);
}

// Startup calls are made in slices of this length so that Stop is noticed while waiting.
constexpr absl::Duration kStartupSlice = absl::Seconds(2);
// How long the gRPC server lets open calls finish at the end.
constexpr auto kShutdownGrace = std::chrono::seconds(2);

// The session gate of the server's port: ShardTransfer's calls go to that service, every other
// call to the ParameterServer service.
class PortGate final : public SessionGate {
 public:
  PortGate(const ParameterServerService* service, const ShardTransferService* transfer)
      : service_(service), transfer_(transfer) {}
  absl::Status Admit(absl::string_view method, absl::string_view credential, const Peer& peer) const override {
    if (absl::StartsWith(method, "/pstrain.ShardTransfer/")) return transfer_->Admit(method, credential, peer);
    return service_->Admit(method, credential, peer);
  }

 private:
  const ParameterServerService* const service_;
  const ShardTransferService* const transfer_;
};

// Calls `call(slice)` with slices of at most kStartupSlice until it succeeds, fails with an error
// other than UNAVAILABLE or DEADLINE_EXCEEDED, `timeout` has passed, or `stopped()` is true. Both
// calls used with it (Register, WaitUntilRunning) may be repeated safely.
template <typename T, typename Call, typename Stopped>
absl::StatusOr<T> CallInSlices(absl::string_view what, absl::Duration timeout, Call call, Stopped stopped) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = std::max(give_up - absl::Now(), absl::Milliseconds(1));
    absl::StatusOr<T> result = call(std::min(kStartupSlice, left));
    if (result.ok() || stopped()) return result;
    const absl::Status& status = result.status();
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) return result;
    if (absl::Now() >= give_up) {
      return absl::Status(
          status.code(), absl::StrCat(what, ": gave up after ", absl::FormatDuration(timeout), ": ", status.message()));
    }
  }
}

// External model (JobSpec.model "external"): the declared initial values, in the flat layout of
// `view`'s shard map. The model file must declare exactly the shard map's tensors (the scheduler
// built the map from it); anything else is FAILED_PRECONDITION, a damaged file the parser's error.
absl::StatusOr<std::shared_ptr<const std::vector<float>>> FetchInitialValues(SchedulerClient* client,
                                                                             const ClusterView& view) {
  ASSIGN_OR_RETURN(const std::string bytes, client->GetInitialModel());
  ASSIGN_OR_RETURN(model::ModelFile file, model::ParseModelFile(bytes, "the declared initial model"));
  const auto& tensors = view.shard_map().tensors();
  if (static_cast<int>(file.params.size()) != tensors.size()) {
    return absl::FailedPreconditionError(absl::StrCat("the declared initial model has ", file.params.size(),
                                                      " tensors; the shard map has ", tensors.size()));
  }
  for (int i = 0; i < tensors.size(); ++i) {
    const model::ParamSpec& p = file.params[i];
    if (p.name != tensors[i].name() || p.num_elements != tensors[i].num_elements() ||
        p.flat_offset != tensors[i].flat_offset()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the declared initial model's tensor ", i, " is '", p.name, "' with ", p.num_elements,
                       " elements at flat offset ", p.flat_offset, "; the shard map's is '", tensors[i].name(),
                       "' with ", tensors[i].num_elements(), " at ", tensors[i].flat_offset()));
    }
  }
  return std::make_shared<const std::vector<float>>(std::move(file.values));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerRunner>> ServerRunner::Create(const Options& options) {
  if (options.scheduler_address.empty()) {
    return absl::InvalidArgumentError("parameter server: scheduler address is empty, expected host:port");
  }
  if (options.host.empty()) return absl::InvalidArgumentError("parameter server: host is empty");
  if (options.health_port < 0 || options.health_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter server: health port ", options.health_port, " is outside [0, 65535] (0: none)"));
  }
  if (options.health_port > 0 && options.health_host.empty()) {
    return absl::InvalidArgumentError("parameter server: health host is empty, expected an address to listen on");
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("parameter server: port ", options.port, " is outside [0, 65535]"));
  }
  if (options.rpc_timeout <= absl::ZeroDuration() || options.startup_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("parameter server: rpc timeout ",
                                                   absl::FormatDuration(options.rpc_timeout), " and startup timeout ",
                                                   absl::FormatDuration(options.startup_timeout), " must both be > 0"));
  }
  if (options.drain_on_stop && options.drain_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("parameter server: drain timeout ",
                                                   absl::FormatDuration(options.drain_timeout), ", expected > 0"));
  }
  return std::unique_ptr<ServerRunner>(new ServerRunner(options));
}

absl::Status ServerRunner::Run() {
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerClient> client,
                   SchedulerClient::Create(options_.scheduler_address, options_.rpc_timeout, options_.security));
  // NOT_SERVING until the servers-ready barrier.
  ASSIGN_OR_RETURN(std::unique_ptr<HealthServer> health,
                   StartHealthListener(options_.health_host, options_.health_port));
  // Declared before the service, which meters calls into them.
  metrics::Registry own_registry;
  std::unique_ptr<ServerMetrics> own_metrics;
  metrics_ = options_.metrics;
  if (metrics_ == nullptr) {
    own_metrics = std::make_unique<ServerMetrics>(&own_registry);
    metrics_ = own_metrics.get();
  }
  // Declared before the gRPC server, so they outlive it.
  ParameterServerService service(metrics_);
  ShardTransferService transfer;
  transfer_ = &transfer;
  const std::string listen = JoinHostPort(options_.host, options_.port);
  int selected_port = 0;
  EnableHealthService();
  const TransportSecurity& security =
      options_.security != nullptr ? *options_.security : *TransportSecurity::Loopback();
  const PortGate gate(&service, &transfer);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, security.ServerCredentials(listen, &gate));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, credentials, &selected_port);
  // Workers on this host move tensors faster over a unix socket than over loopback TCP, and with
  // TLS on, unencrypted: the socket's private folder keeps other users out, the job token and the
  // session gate everyone else (TransportSecurity).
  // As for a folder that cannot take the socket (UnixSocketPath): logged and skipped, TCP serves.
  std::string unix_path = UnixSocketPath();
  if (!unix_path.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> local_credentials =
        security.ServerCredentials("unix:" + unix_path, &gate);
    if (local_credentials.ok()) {
      builder.AddListeningPort("unix:" + unix_path, *local_credentials);
    } else {
      LOG(WARNING) << "no unix socket for local workers: " << local_credentials.status().message();
      rmdir(std::filesystem::path(unix_path).parent_path().c_str());
      unix_path.clear();
    }
  }
  builder.RegisterService(&service);
  builder.RegisterService(&transfer);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  listener_quota_ = std::make_unique<grpc::ResourceQuota>("parameter server port");
  listener_quota_->Resize(kOversizeRoomBytes);
  builder.SetResourceQuota(*listener_quota_);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || selected_port == 0) {
    return CannotListen("parameter server", listen, "port");
  }
  SetServing(server.get(), health.get(), false);  // Until registered with its shard ready.
  {
    absl::MutexLock lock(&mu_);
    port_ = selected_port;
    grpc_server_ = server.get();
    health_listener_ = health.get();
  }
  // Workers dial what the server registers: the advertised host (e.g. the pod's name) with the
  // port it listens on.
  const std::string address =
      JoinHostPort(options_.advertise_host.empty() ? options_.host : options_.advertise_host, selected_port);
  LOG(INFO) << "parameter server listening on " << JoinHostPort(options_.host, selected_port) << " (advertised as "
            << address << "), scheduler at " << options_.scheduler_address;
  if (options_.metrics_port > 0) {
    client->set_metrics_address(
        MetricsAddress(options_.metrics_host, options_.advertise_host.empty() ? options_.host : options_.advertise_host,
                       options_.metrics_port));
  }

  LocalEndpoint local;
  if (!unix_path.empty()) {
    local.set_unix_address("unix:" + unix_path);
    local.set_host_id(HostId());
    LOG(INFO) << "also serving on " << local.unix_address() << " for workers on this host";
  }
  absl::Status status = ServeJob(client.get(), address, local, &service);
  const std::shared_ptr<ParameterStore> store = CurrentStore();
  SetServing(server.get(), health.get(), false);
  {
    absl::MutexLock lock(&mu_);
    grpc_server_ = nullptr;
    health_listener_ = nullptr;
  }

  // The store first: it finishes every parked call, and the gRPC server's shutdown waits for all
  // open calls. The store outlives the server, which may still route a late call to it.
  // The step counters, so a test can check that no step was applied twice.
  if (store != nullptr) {
    LOG(INFO) << "server: shard " << store->rank() << " ends at step " << store->step();
    LogTableStats(*store);
  }
  if (const std::shared_ptr<ParameterStore> replica = CurrentReplica(); replica != nullptr) {
    LOG(INFO) << "server: " << (replica_promoted_ ? "promoted copy" : "copy") << " of shard " << replica->rank()
              << " ends at step " << replica->step();
    replica->Shutdown();
  }
  if (store != nullptr) store->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server->Wait();
  // The stores and the service go with this call; scrapes keep their final values.
  metrics_->Unwatch();
  // After Wait no call is open, so the counts are final.
  if (store != nullptr) LOG(INFO) << FormatTransportCounters(store->rank(), service.counters());
  if (!unix_path.empty()) {
    unlink(unix_path.c_str());
    rmdir(std::filesystem::path(unix_path).parent_path().c_str());
  }
  LOG(INFO) << "parameter server at " << address << " stopped: " << status;
  return status;
}

std::string ServerRunner::UnixSocketPath() const {
  if (options_.unix_socket_dir.empty()) return "";
  // A folder of this process's own that only its user may enter, inside the one given.
  absl::StatusOr<std::string> dir =
      PrivateSocketDir(options_.unix_socket_dir, absl::StrCat("pstrain-server-", getpid()));
  if (!dir.ok()) {
    LOG(WARNING) << "no unix socket for local workers: " << dir.status().message();
    return "";
  }
  const std::string path = *dir + "/ps.sock";
  // sockaddr_un holds 108 bytes; gRPC would fail the whole server on a longer path.
  if (path.size() >= 100) {
    LOG(WARNING) << "no unix socket for local workers: '" << path << "' is longer than a socket address can be";
    rmdir(dir->c_str());
    return "";
  }
  unlink(path.c_str());  // a socket left by an earlier process with this pid
  return path;
}

absl::Status ServerRunner::ServeJob(SchedulerClient* client, const std::string& address, const LocalEndpoint& local,
                                    ParameterServerService* service) {
  auto is_stopped = [this] { return stopped(); };
  client->set_build_fingerprint(model::BuildFingerprint());
  absl::StatusOr<RegisterResponse> registered = CallInSlices<RegisterResponse>(
      "server: registering", options_.startup_timeout,
      [&](absl::Duration slice) { return client->Register(SERVER, address, slice, local); }, is_stopped);
  if (stopped()) return absl::OkStatus();
  if (absl::IsAlreadyExists(registered.status())) {
    // Replicas: this server's rank died and its shards are served by promoted copies.
    LOG(INFO) << "server not needed, exiting: " << registered.status().message();
    return absl::OkStatus();
  }
  if (absl::IsAborted(registered.status())) {
    LOG(ERROR) << "the job failed before this server joined: " << registered.status().message();
  }
  if (!registered.ok()) return registered.status();
  const RegisterResponse& registration = *registered;
  if (registration.job_state() == FINISHED) {
    // E.g. an orchestrator restarted this server after the end: there is nothing left to do.
    LOG(INFO) << "the job is over (FINISHED); nothing to do";
    return absl::OkStatus();
  }
  const int rank = registration.rank();
  LOG(INFO) << "registered as server " << rank;
  metrics_->registry()->SetConstantLabels({{"role", "server"}, {"rank", absl::StrCat(rank)}});
  JobSpec job = registration.job();
  const bool checkpointing = CheckpointsOn(job);
  if (checkpointing && !options_.checkpoint_dir.empty()) job.set_checkpoint_dir(options_.checkpoint_dir);
  // The scheduler picks a restore step from every server's list when a server must be replaced;
  // a failed report is retried by the membership thread.
  if (checkpointing && !ReportCheckpoints(client, rank, job.checkpoint_dir()).ok()) NoteCheckpointsChanged();

  absl::StatusOr<ClusterView> waited = CallInSlices<ClusterView>(
      "server: waiting for every role to register", options_.startup_timeout,
      [&](absl::Duration slice) { return client->WaitUntilRunning(slice); }, is_stopped);
  if (stopped()) return absl::OkStatus();
  if (!waited.ok()) return waited.status();
  job_servers_ = registration.job().num_servers();
  job_ = job;
  const absl::Duration interval =
      registration.heartbeat_ms() > 0 ? absl::Milliseconds(registration.heartbeat_ms()) : absl::Seconds(1);
  const absl::Duration give_up = registration.dead_after_ms() > 0
                                     ? std::max(absl::Milliseconds(registration.dead_after_ms()), 3 * interval)
                                     : absl::Seconds(10);
  // ASYNC/SSP: the lease the scheduler wants this server's confirmations from (AppliedLeases).
  std::atomic<int64_t> report_leases_from{1};
  // From the moment the job runs, so that a server killed while it waits for a cut-over or restores
  // its shards is found dead after dead_after (HeartbeatRequest.restoring). Destroyed after the
  // lock at the end is released: its thread may be calling EndJob.
  Heartbeater heartbeater(
      client, SERVER, rank, interval, give_up, [this](absl::Status s) { EndJob(std::move(s)); },
      [this](int64_t epoch) { NoteMembershipEpoch(epoch); },
      [this, metrics = metrics_, &report_leases_from](HeartbeatRequest* request) {
        const std::shared_ptr<ParameterStore> primary = CurrentStore();
        *request->mutable_traffic() = metrics->Traffic();
        if (primary == nullptr) {
          // Waiting for a cut-over, or building or restoring the stores (ServeJob, below).
          request->set_restoring(true);
          return;
        }
        std::shared_ptr<ParameterStore> replica;
        {
          absl::MutexLock lock(&mu_);
          replica = replica_;
          if (resharded_.has_value()) *request->mutable_resharded() = *resharded_;
        }
        // Until a re-shard swaps its store in, the old one's epoch: the scheduler knows this
        // server is still restoring.
        request->set_store_epoch(primary->membership_epoch());
        AddTableUsage(*primary, /*replica=*/false, request);
        if (replica != nullptr) AddTableUsage(*replica, /*replica=*/true, request);
        const int64_t from = report_leases_from.load();
        if (from > 0) *request->mutable_applied_leases() = AppliedLeasesOf(*primary, replica.get(), from);
        // After the leases: the step covers every batch they confirm (the quiet cut is beyond it).
        request->set_step(primary->step());
      },
      [this, &report_leases_from](const HeartbeatResponse& answer) {
        report_leases_from.store(answer.report_leases_from());
        const std::shared_ptr<ParameterStore> primary = CurrentStore();
        if (primary != nullptr && answer.leases_settled_below() > 0) {
          primary->SettleLeasesBelow(answer.leases_settled_below());
          if (const std::shared_ptr<ParameterStore> replica = CurrentReplica(); replica != nullptr) {
            replica->SettleLeasesBelow(answer.leases_settled_below());
          }
        }
        NoteFinalShardsWanted(answer);
        NoteQuietCutWanted(answer.checkpoint_at_step());
        NoteMapRestored(answer.map_restored_epoch());
      });
  // 0: a map and a job that say no count (a test's bare view): no rank is outside it.
  const int map_servers = ServersOfMap(waited->shard_map(), job_servers_);
  if (map_servers > 0 && rank >= map_servers) {
    // A server added by a scale-up (docs/design/resharding.md): it serves once the scheduler cuts
    // over to a map that has its rank, restoring that cut re-sharded like the others.
    LOG(INFO) << "server " << rank << ": waiting for the job to cut over to a map with this rank (it has "
              << map_servers << " servers)";
    // Until the cut-over, or the heartbeats find the scheduler lost (a dropped server's heartbeats
    // are refused first, but the view tells it it was dropped: exit 0).
    waited = CallInSlices<ClusterView>(
        "server: waiting for the cut-over to the new server count", options_.startup_timeout,
        [&](absl::Duration slice) -> absl::StatusOr<ClusterView> {
          const absl::Time end = absl::Now() + slice;
          while (true) {
            ASSIGN_OR_RETURN(ClusterView view, client->GetClusterView());
            if (view.state() != RUNNING || rank < ServersOfMap(view.shard_map(), job_servers_) ||
                !ListsServer(view, rank, address)) {
              return view;
            }
            if (absl::Now() > end) return absl::DeadlineExceededError("no cut-over yet");
            absl::SleepFor(absl::Milliseconds(100));
          }
        },
        [this] { return stopped() || SchedulerLost(); });
    if (stopped()) return absl::OkStatus();
    if (SchedulerLost()) {
      absl::MutexLock lock(&mu_);
      return job_status_;
    }
    if (!waited.ok()) return waited.status();
    if (waited->state() != RUNNING) {
      LOG(INFO) << "the job ended (" << JobState_Name(waited->state()) << ") before this server was needed";
      return absl::OkStatus();
    }
    if (rank >= ServersOfMap(waited->shard_map(), job_servers_)) {
      // Dropped from the job: the change was cancelled (by an operator, or because not every added
      // server registered in time).
      LOG(INFO) << "server " << rank << ": the change of the server count this server was started for was "
                << "cancelled; it is not needed";
      return absl::OkStatus();
    }
  }
  const ClusterView& view = *waited;

  if (IsExternalModel(job)) {
    // The declared values: for the fresh store, its rollback to step 0, the replica and the stores
    // of later shard maps alike.
    absl::StatusOr<std::shared_ptr<const std::vector<float>>> values = FetchInitialValues(client, view);
    if (!values.ok()) {
      return ReportFatal(
          client, rank,
          absl::Status(values.status().code(),
                       absl::StrCat("server ", rank, ": fetching the initial model: ", values.status().message())));
    }
    initial_values_ = *std::move(values);
    LOG(INFO) << "server " << rank << ": initial weights from the declared model (" << initial_values_->size()
              << " floats)";
  }
  const ParameterStore::Options store_options = StoreOptions(job, view, rank);
  absl::StatusOr<std::unique_ptr<ParameterStore>> created = ParameterStore::Create(store_options);
  if (!created.ok()) {
    // Fail the job now rather than when the workers time out on us.
    return ReportFatal(
        client, rank,
        absl::Status(created.status().code(), absl::StrCat("server ", rank, ": ", created.status().message())));
  }
  std::shared_ptr<ParameterStore> own = std::move(created).value();
  std::shared_ptr<ParameterStore> replica;
  if (job.replicas() == 2) {
    // (The map's count: a server added by a change of the server count starts under the new map.)
    ASSIGN_OR_RETURN(replica, CreateReplica(client, rank, ServersOfMap(view.shard_map(), job_servers_), store_options));
  }
  // Other servers may ask for parts of this server's cuts from now on (a change of the server
  // count, or a resume, when the servers keep folders of their own): before this one's own
  // rollback, which may be asking them for theirs at the same time.
  absl::StatusOr<std::unique_ptr<SessionVerifier>> transfer_sessions =
      SessionVerifier::Create(view.session_public_key());
  if (!transfer_sessions.ok()) return ReportFatal(client, rank, transfer_sessions.status());
  transfer_->SetMap(view.shard_map());
  transfer_->Start(rank, checkpointing ? job.checkpoint_dir() : "", *std::move(transfer_sessions));
  // A replacement for a dead server, or a resumed job: the view already asks for a rollback (of
  // both stores: the copy too), which must be in place before the stores serve anything. ASYNC/SSP:
  // a replacement goes back to its predecessor's newest checkpoint, alone (restore_own_step; the
  // view's restore step, if any, is the quiet cut of the last change of the server count, which
  // only a server added by it, or a replacement with no checkpoint since, restores).
  const bool own_step = job.mode() != SYNC && registration.has_restore_own_step();
  if (view.has_restore_step() && !own_step) {
    const absl::Time start = absl::Now();
    ReshardCounts counts;
    RETURN_IF_ERROR(
        RollBack(client, rank, job.checkpoint_dir(), view.restore_step(), view, own.get(), replica.get(), &counts));
    if (view.restore_servers() > 0) {
      // A cut of another server count, re-cut: a server added by a change (or a resumed job).
      const ReshardReport report = ReshardReportOf(view.shard_map().version(), absl::Now() - start, counts);
      absl::MutexLock lock(&mu_);
      resharded_ = report;
    }
  } else if (own_step) {
    RETURN_IF_ERROR(
        RollBack(client, rank, job.checkpoint_dir(), registration.restore_own_step(), view, own.get(), replica.get()));
  }
  // Workers prove their rank with the credential the scheduler signed (common/session_credential.h).
  absl::StatusOr<std::unique_ptr<SessionVerifier>> sessions = SessionVerifier::Create(view.session_public_key());
  if (!sessions.ok()) {
    return ReportFatal(client, rank,
                       absl::FailedPreconditionError(
                           absl::StrCat("server ", rank, ": the cluster view's ", sessions.status().message())));
  }
  service->RequireSessions(*std::move(sessions), {job.mode() != SYNC, std::max(1, job.batch_size())});
  // The job's bounds on request size and bytes in flight, before the first call is served.
  std::vector<int> hosted = {rank};
  if (replica != nullptr) hosted.push_back(replica->rank());
  const RequestLimits limits = LimitsFor(store_options.job, view.shard_map(), hosted);
  service->SetLimits(limits);
  listener_quota_->Resize(ListenerQuotaBytes(limits));
  LOG(INFO) << "server " << rank << ": requests up to " << limits.max_request_bytes << " bytes, "
            << limits.max_inflight_bytes << " bytes in flight, " << ListenerQuotaBytes(limits) << " bytes held by gRPC";
  service->SetStores(own, replica);
  metrics_->Watch(own.get(), replica.get(), [service] { return service->inflight_bytes(); });
  {
    absl::MutexLock lock(&mu_);
    store_ = own;
    replica_ = replica;
  }
  replica.reset();  // replica_ holds it: a re-shard replaces it
  RETURN_IF_ERROR(RefreshMembership(client, service, rank, job.checkpoint_dir(), own.get()));

  if (stopped()) return absl::OkStatus();
  RETURN_IF_ERROR(client->Barrier(kServersReadyBarrier, BarrierRequest::ALL, SERVER, rank, options_.startup_timeout));
  LOG(INFO) << "server " << rank << " serving " << view.workers_size() << " workers";
  {
    absl::MutexLock lock(&mu_);
    SetServing(grpc_server_, health_listener_, true);
  }

  // A lease's last batch reaches the scheduler within Heartbeater::kMinNudgeGap, not a period.
  // (ASYNC/SSP only: a store of a later shard map, SYNC, needs none.)
  own->SetOnLeaseBatchApplied([&heartbeater] { heartbeater.Nudge(); });
  absl::Cleanup no_nudges = [this] { CurrentStore()->SetOnLeaseBatchApplied(nullptr); };
  // store_ holds it from here: a re-shard frees it once no call holds it.
  own.reset();
  // Not on the heartbeat thread: a slow GetClusterView must not delay the heartbeats.
  std::thread membership([&] {
    FollowMembership(client, service, &heartbeater, rank, checkpointing ? job.checkpoint_dir() : "", interval,
                     KeptFreedBoundBytes(limits));
  });
  WaitForTheEnd(client, rank);
  membership.join();  // returns within one GetClusterView (bounded by the rpc timeout)
  absl::MutexLock lock(&mu_);
  return job_ended_ ? job_status_ : absl::OkStatus();
}

void ServerRunner::WaitForTheEnd(SchedulerClient* client, int rank) {
  {
    absl::MutexLock lock(&mu_);
    may_drain_ = options_.drain_on_stop;
    mu_.Await(absl::Condition(this, &ServerRunner::StoppedEndedOrDrainWanted));
    may_drain_ = false;  // from here a Stop stops
    if (StoppedOrEnded()) return;
  }
  // Stopped with drain_on_stop: the scale-down's cut-over drops this server from the map
  // (Reshard, on the membership thread), which ends the job for it.
  const absl::Status asked = client->Leave(SERVER, rank, "stopped; it drains itself (--drain_on_stop)");
  absl::MutexLock lock(&mu_);
  if (!asked.ok()) {
    LOG(WARNING) << "server " << rank << ": stopped, and cannot drain itself: " << asked << "; stopping";
    stop_requested_ = true;
    return;
  }
  LOG(INFO) << "server " << rank << ": stopped; draining: serving until the scale-down's cut-over drops it (up to "
            << absl::FormatDuration(options_.drain_timeout) << "; stop again to stop at once)";
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &ServerRunner::StoppedOrEnded), options_.drain_timeout)) {
    LOG(WARNING) << "server " << rank << ": not drained within " << absl::FormatDuration(options_.drain_timeout)
                 << "; stopping";
    stop_requested_ = true;
  }
}

std::shared_ptr<ParameterStore> ServerRunner::CurrentStore() const {
  absl::MutexLock lock(&mu_);
  return store_;
}

std::shared_ptr<ParameterStore> ServerRunner::CurrentReplica() const {
  absl::MutexLock lock(&mu_);
  return replica_;
}

absl::StatusOr<std::shared_ptr<ParameterStore>> ServerRunner::CreateReplica(SchedulerClient* client, int rank,
                                                                            int servers,
                                                                            ParameterStore::Options options) {
  // The live copy of the shard before this server's; it writes no checkpoints until promoted.
  options.rank = (rank + servers - 1) % servers;
  options.on_checkpoint_written = nullptr;
  options.write_checkpoints = false;
  options.metrics = metrics_->ForShard(options.rank);
  absl::StatusOr<std::unique_ptr<ParameterStore>> replica = ParameterStore::Create(options);
  if (!replica.ok()) {
    return ReportFatal(
        client, rank,
        absl::Status(replica.status().code(), absl::StrCat("server ", rank, ": replica of shard ", options.rank, ": ",
                                                           replica.status().message())));
  }
  LOG(INFO) << "server " << rank << " also holds the live copy of shard " << options.rank;
  return std::shared_ptr<ParameterStore>(std::move(replica).value());
}

ParameterStore::Options ServerRunner::StoreOptions(const JobSpec& job, const ClusterView& view, int rank) {
  ParameterStore::Options options;
  options.rank = rank;
  options.job = job;
  // The map's server count (a job that changed its count: not the job's first one), which places
  // the table keys.
  if (ServersOfMap(view.shard_map(), job_servers_) > 0) {
    options.job.set_num_servers(ServersOfMap(view.shard_map(), job_servers_));
  }
  // The view's tables are the job's: a declared model's (external) reach the servers only there.
  if (view.tables_size() > 0) *options.job.mutable_tables() = view.tables();
  options.shard_map = view.shard_map();
  options.num_workers = view.workers_size() > 0 ? view.workers_size() : job.num_workers();
  for (const WorkerInfo& w : view.workers()) options.worker_ranks.push_back(w.rank());
  options.membership_epoch = view.membership_epoch();
  options.total_steps = view.total_steps();
  options.metrics = metrics_->ForShard(rank);
  if (CheckpointsOn(job)) options.on_checkpoint_written = [this](int64_t) { NoteCheckpointsChanged(); };
  options.keep_from = keep_from_;
  options.initial_values = initial_values_;
  return options;
}

RequestLimits ServerRunner::LimitsFor(const JobSpec& store_job, const ShardMap& map, const std::vector<int>& hosted) {
  JobSpec limits_job = store_job;
  ApplyJobDefaults(&limits_job);
  return RequestLimitsForJob(limits_job, map, hosted);
}

absl::Status ServerRunner::Reshard(SchedulerClient* client, ParameterServerService* service, int rank,
                                   const std::string& checkpoint_dir, const ClusterView& view) {
  const int servers = ServersOfMap(view.shard_map(), job_servers_);
  const absl::Time start = absl::Now();
  const std::shared_ptr<ParameterStore> old = CurrentStore();
  const std::shared_ptr<ParameterStore> old_replica = CurrentReplica();
  const std::string what = absl::StrCat("server ", rank, ": shard map version ", old->shard_map_version(), " -> ",
                                        view.shard_map().version(), " (", servers, " servers)");
  // The new servers may ask this one for parts of the cut under the new map.
  transfer_->SetMap(view.shard_map());
  // The old map's steps after the cut are abandoned: the old store answers nothing more and
  // writes no checkpoint of them.
  old->Retire();
  old->SetOnLeaseBatchApplied(nullptr);
  if (old_replica != nullptr) old_replica->Retire();
  if (rank >= servers) {
    // Drained by a scale-down: its shard lives on in the others' restore of the cut. With a
    // folder of its own, the others lack its checkpoints and fetch their parts from it
    // (ShardTransfer): it stays until the scheduler says every server of the map has restored,
    // and the new map has a cut of its own, so that no recovery goes back to the change's cut
    // (HeartbeatResponse.map_restored_epoch). In the job's folder they read its files.
    if (!options_.checkpoint_dir.empty()) {
      LOG(INFO) << what << ": this server is drained; serving its checkpoints until the new map's servers restored";
      absl::MutexLock lock(&mu_);
      const int64_t cut_over = view.restore_epoch();
      auto restored = [this, cut_over]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return map_restored_epoch_ >= cut_over || StoppedOrEnded();
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&restored), options_.startup_timeout)) {
        LOG(WARNING) << what << ": the new map's servers did not all restore within "
                     << absl::FormatDuration(options_.startup_timeout) << "; leaving anyway";
      }
    }
    LOG(INFO) << what << ": this server is drained; leaving the job";
    // Ended first: the heartbeats the scheduler refuses after the leave end nothing more.
    EndJob(absl::OkStatus());
    if (absl::Status left = client->Leave(SERVER, rank, "drained by a scale-down"); !left.ok()) {
      LOG(WARNING) << "server " << rank << ": leave: " << left;
    }
    return absl::OkStatus();
  }
  if (!view.has_restore_step() || view.restore_servers() < 1) {
    return ReportFatal(
        client, rank,
        absl::FailedPreconditionError(absl::StrCat(what,
                                                   ": the view names no cut of the old server count to restore "
                                                   "(restore_step and restore_servers)")));
  }
  const ParameterStore::Options options = StoreOptions(job_, view, rank);
  absl::StatusOr<std::unique_ptr<ParameterStore>> created = ParameterStore::Create(options);
  if (!created.ok()) {
    return ReportFatal(client, rank,
                       absl::Status(created.status().code(), absl::StrCat(what, ": ", created.status().message())));
  }
  std::shared_ptr<ParameterStore> fresh = std::move(created).value();
  std::shared_ptr<ParameterStore> fresh_replica;
  std::vector<int> hosted = {rank};
  if (old_replica != nullptr) {
    // Every shard and its copy are placed afresh: this server's copy is of the shard before it
    // under the new map, restored from the same cut.
    ASSIGN_OR_RETURN(fresh_replica, CreateReplica(client, rank, servers, options));
    hosted.push_back(fresh_replica->rank());
  }
  ReshardCounts counts;
  RETURN_IF_ERROR(
      RollBack(client, rank, checkpoint_dir, view.restore_step(), view, fresh.get(), fresh_replica.get(), &counts));
  const RequestLimits limits = LimitsFor(options.job, view.shard_map(), hosted);
  service->SetLimits(limits);
  listener_quota_->Resize(ListenerQuotaBytes(limits));
  service->ReplaceStores(fresh, fresh_replica);
  metrics_->Watch(fresh.get(), fresh_replica.get(), [service] { return service->inflight_bytes(); });
  const ReshardReport report = ReshardReportOf(view.shard_map().version(), absl::Now() - start, counts);
  const int64_t pause_ms = report.pause_ms();
  {
    absl::MutexLock lock(&mu_);
    store_ = fresh;
    replica_ = fresh_replica;
    resharded_ = report;
  }
  replica_promoted_ = false;
  LOG(INFO) << what << ": serving the re-cut shard from step " << fresh->step() << " (" << pause_ms
            << " ms without serving; of its " << counts.rows << " rows and " << counts.bytes << " bytes, "
            << counts.rows_moved << " rows and " << counts.bytes_moved << " bytes were another server's)";
  return absl::OkStatus();
}

void ServerRunner::FollowMembership(SchedulerClient* client, ParameterServerService* service, Heartbeater* heartbeater,
                                    int rank, const std::string& checkpoint_dir, absl::Duration poll,
                                    int64_t kept_freed_bound) {
  int64_t tried = 0;           // the newest epoch a refresh was made for; a failed one is retried after `poll`
  bool report_failed = false;  // a failed checkpoint report is retried after `poll`
  SlowStepWatch slow_steps(rank);
  FreedMemoryBound kept_freed(kept_freed_bound);
  while (true) {
    int64_t hint = 0;
    bool report = false;
    std::vector<int> final_shards;
    int64_t quiet_cut = 0;
    {
      absl::MutexLock lock(&mu_);
      auto due = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return StoppedOrEnded() || membership_hint_ > tried || checkpoints_changed_ || !final_shards_wanted_.empty() ||
               quiet_cut_wanted_ > quiet_cut_written_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&due), poll);
      if (StoppedOrEnded()) return;
      hint = membership_hint_;
      report = checkpoints_changed_ || report_failed;
      checkpoints_changed_ = false;
      final_shards.swap(final_shards_wanted_);
      if (quiet_cut_wanted_ > quiet_cut_written_) quiet_cut = quiet_cut_wanted_;
    }
    // The heartbeater reports no change on its first answer, so its epoch also covers a change
    // between the start-up refresh and that answer.
    const int64_t target = std::max(hint, heartbeater->membership_epoch());
    // Taken afresh each round: a change of the server count replaces it (Reshard).
    std::shared_ptr<ParameterStore> store = CurrentStore();
    if (target > store->membership_epoch()) {
      const absl::Status status = RefreshMembership(client, service, rank, checkpoint_dir, store.get());
      if (!status.ok()) {
        EndJob(status);
        return;
      }
      // A re-shard: the scheduler learns what it cost (HeartbeatRequest.resharded) now.
      if (CurrentStore() != store) heartbeater->Nudge();
      tried = std::max(tried, target);
    }
    // After the membership refresh: a quiet cut asked for under a map this server no longer serves
    // is void (its store was replaced by one of the new map; writing it would put the new map's
    // shard in the file of the cut the others may still be reading).
    if (quiet_cut > 0 && CurrentStore() == store) {
      WriteQuietCut(store.get(), quiet_cut);
    } else if (quiet_cut > 0) {
      absl::MutexLock lock(&mu_);
      if (quiet_cut_wanted_ == quiet_cut) quiet_cut_wanted_ = quiet_cut_written_;
    }
    if (kept_freed.Check()) VLOG(1) << "server " << rank << ": returned freed memory";
    if (report && !checkpoint_dir.empty()) report_failed = !ReportCheckpoints(client, rank, checkpoint_dir).ok();
    // After the membership refresh above, so that a copy promoted by the same change sends its shard.
    if (!final_shards.empty()) {
      if (absl::Status s = SendFinalShards(client, rank, *store, final_shards); !s.ok()) {
        EndJob(s);
        return;
      }
    }
    if (std::optional<SlowStepReport> slow = slow_steps.Check(store->Pending(absl::Now())); slow.has_value()) {
      LOG(WARNING) << "server " << rank << ": step " << slow->step() << " has waited " << slow->waited_ms()
                   << " ms for workers [" << absl::StrJoin(slow->waiting_for(), ", ") << "]";
      if (absl::Status s = client->ReportSlowStep(*slow); !s.ok()) LOG(WARNING) << s;
    }
  }
}

absl::Status ServerRunner::RefreshMembership(SchedulerClient* client, ParameterServerService* service, int rank,
                                             const std::string& checkpoint_dir, ParameterStore* store) {
  absl::StatusOr<ClusterView> view = client->GetClusterView();
  if (!view.ok()) {
    LOG(WARNING) << "cannot fetch the cluster view for a membership change: " << view.status();
    return absl::OkStatus();
  }
  if (view->membership_epoch() > store->membership_epoch() &&
      view->shard_map().version() != store->shard_map_version()) {
    return Reshard(client, service, rank, checkpoint_dir, *view);
  }
  // A recovery set after the store's epoch has not been applied yet (one epoch may also carry
  // a later worker change; restore_epoch tells them apart).
  if (view->membership_epoch() > store->membership_epoch() && view->has_restore_step() &&
      view->restore_epoch() > store->membership_epoch()) {
    return RollBack(client, rank, checkpoint_dir, view->restore_step(), *view, store, CurrentReplica().get());
  }
  std::vector<int> ranks;
  ranks.reserve(view->workers_size());
  for (const WorkerInfo& w : view->workers()) ranks.push_back(w.rank());
  if (const std::shared_ptr<ParameterStore> replica = CurrentReplica(); replica != nullptr) {
    // Both stores move to the epoch, each dropping its unfinished step: the workers recompute it
    // for both.
    const absl::Status status = replica->UpdateMembership(view->membership_epoch(), ranks);
    if (!status.ok()) LOG(WARNING) << "cannot install membership epoch " << view->membership_epoch() << ": " << status;
    const int shard = replica->rank();
    const bool promoted = shard < view->shard_hosts_size() && view->shard_hosts(shard).primary() == rank;
    if (promoted && !replica_promoted_.exchange(true)) {
      replica->EnableCheckpoints();
      LOG(INFO) << "server " << rank << ": promoted its copy of shard " << shard << " (at step " << replica->step()
                << ") to primary at membership epoch " << view->membership_epoch();
    }
  }
  const absl::Status status = store->UpdateMembership(view->membership_epoch(), std::move(ranks));
  if (!status.ok()) LOG(WARNING) << "cannot install membership epoch " << view->membership_epoch() << ": " << status;
  return absl::OkStatus();
}

absl::Status ServerRunner::RollBack(SchedulerClient* client, int rank, const std::string& checkpoint_dir, int64_t step,
                                    const ClusterView& view, ParameterStore* store, ParameterStore* replica,
                                    ReshardCounts* counts) {
  // SYNC (the view's restore step): the copy of the shard before this one goes back too, to the
  // same cut, from its primary's files.
  const bool sync_restore = view.has_restore_step() && step == view.restore_step();
  // A cut of another server count: every old rank's checkpoint this server's folder holds, read
  // once for both stores; a rank whose file is not there (servers with folders of their own) is
  // fetched from its server for each store (RestoreStore).
  std::optional<std::vector<std::optional<ShardCheckpoint>>> cut;
  if (sync_restore && view.restore_servers() > 0) {
    cut.emplace();
    for (int from = 0; from < view.restore_servers(); ++from) {
      absl::StatusOr<ShardCheckpoint> read = ReadCheckpointChain(checkpoint_dir, from, step);
      if (absl::IsNotFound(read.status())) {
        cut->emplace_back();
        continue;
      }
      if (!read.ok()) {
        return ReportFatal(
            client, rank,
            absl::Status(read.status().code(),
                         absl::StrCat("server ", rank, ": rolling back to step ", step, " for membership epoch ",
                                      view.membership_epoch(), ": reading the cut of step ", step, " taken on ",
                                      view.restore_servers(), " servers: server ", from,
                                      "'s checkpoint: ", read.status().message())));
      }
      cut->push_back(*std::move(read));
    }
  }
  const std::vector<std::optional<ShardCheckpoint>>* old = cut.has_value() ? &*cut : nullptr;
  RETURN_IF_ERROR(RestoreStore(client, rank, checkpoint_dir, step, view, old, store, counts));
  if (sync_restore && replica != nullptr) {
    RETURN_IF_ERROR(RestoreStore(client, rank, checkpoint_dir, step, view, old, replica, nullptr));
  }
  // Files of the abandoned run were removed; the scheduler gets the new list.
  if (!checkpoint_dir.empty()) NoteCheckpointsChanged();
  return absl::OkStatus();
}

absl::Status ServerRunner::RestoreStore(SchedulerClient* client, int rank, const std::string& checkpoint_dir,
                                        int64_t step, const ClusterView& view,
                                        const std::vector<std::optional<ShardCheckpoint>>* cut, ParameterStore* store,
                                        ReshardCounts* counts) {
  const int shard = store->rank();
  const std::string what = absl::StrCat("server ", rank, ": rolling back ",
                                        shard == rank ? std::string() : absl::StrCat("its copy of shard ", shard, " "),
                                        "to step ", step, " for membership epoch ", view.membership_epoch());
  // The step's file, and when it is a delta, its chain back to a base (server/checkpoint_chain.h);
  // or, for a cut of another server count, that cut's checkpoints re-cut into the shard
  // (server/checkpoint_reshard.h), each read from this server's folder or its part fetched.
  const bool reshard = cut != nullptr;
  auto recut = [&]() -> absl::StatusOr<ShardCheckpoint> {
    std::vector<ShardCheckpoint> fetched;
    fetched.reserve(cut->size());  // never reallocated: `parts` points into it
    std::vector<const ShardCheckpoint*> parts;
    for (size_t from = 0; from < cut->size(); ++from) {
      if ((*cut)[from].has_value()) {
        parts.push_back(&*(*cut)[from]);
        continue;
      }
      absl::StatusOr<ShardCheckpoint> part = FetchPart(client, static_cast<int>(from), step, view, shard);
      if (!part.ok()) {
        return absl::Status(
            part.status().code(),
            absl::StrCat("reading the cut of step ", step, " taken on ", cut->size(), " servers: server ", from,
                         "'s checkpoint is not in '", checkpoint_dir, "', and ", part.status().message()));
      }
      fetched.push_back(*std::move(part));
      parts.push_back(&fetched.back());
    }
    ASSIGN_OR_RETURN(
        ShardCheckpoint out,
        ReshardCheckpoints(parts, view.shard_map(), ServersOfMap(view.shard_map(), job_servers_), shard, counts));
    if (!fetched.empty()) LOG(INFO) << what << ": fetched the parts of " << fetched.size() << " old servers from them";
    return out;
  };
  absl::StatusOr<ShardCheckpoint> ckpt = reshard ? recut() : ReadCheckpointChain(checkpoint_dir, shard, step);
  if (reshard && ckpt.ok()) {
    LOG(INFO) << what << ": re-cut the " << view.restore_servers() << " servers' checkpoints of step " << step
              << " into the shard's " << ckpt->chunks.size() << " chunks";
  }
  const bool initial = !ckpt.ok() && step == 0 && absl::IsNotFound(ckpt.status());
  if (!ckpt.ok() && !initial) {
    return ReportFatal(client, rank,
                       absl::Status(ckpt.status().code(), absl::StrCat(what, ": ", ckpt.status().message())));
  }
  std::vector<int> ranks;
  ranks.reserve(view.workers_size());
  for (const WorkerInfo& w : view.workers()) ranks.push_back(w.rank());
  const absl::Status status =
      store->RestoreAndUpdateMembership(initial ? nullptr : &*ckpt, view.membership_epoch(), std::move(ranks));
  if (absl::IsUnavailable(status)) return absl::OkStatus();  // shutting down: the job ends anyway
  if (!status.ok()) {
    return ReportFatal(client, rank, absl::Status(status.code(), absl::StrCat(what, ": ", status.message())));
  }
  LOG(INFO) << what << ": done" << (initial ? " (no checkpoint of step 0: initial weights)" : "");
  return absl::OkStatus();
}

absl::StatusOr<ShardCheckpoint> ServerRunner::FetchPart(SchedulerClient* client, int from, int64_t step,
                                                        const ClusterView& view, int shard) {
  const ServerInfo* source = nullptr;
  for (const ServerInfo& s : view.servers()) {
    if (s.rank() == from) source = &s;
  }
  if (source == nullptr) {
    return absl::NotFoundError(absl::StrCat("the view lists no server ", from, " to fetch its part from"));
  }
  const TransportSecurity& security =
      options_.security != nullptr ? *options_.security : *TransportSecurity::Loopback();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  const std::unique_ptr<ShardTransfer::Stub> stub =
      ShardTransfer::NewStub(security.NewChannel(source->address(), args, CertRole::kServer));
  const absl::Time give_up = absl::Now() + options_.startup_timeout;
  while (true) {
    absl::StatusOr<ShardCheckpoint> part = FetchCutPart(stub.get(), client->session_credential(), options_.rpc_timeout,
                                                        step, from, view.shard_map().version(), shard);
    if (part.ok() || !absl::IsUnavailable(part.status()) || absl::Now() > give_up || stopped()) return part;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::Status ServerRunner::SendFinalShards(SchedulerClient* client, int rank, const ParameterStore& store,
                                           const std::vector<int>& shards) {
  const std::shared_ptr<ParameterStore> replica = CurrentReplica();
  for (int shard : shards) {
    const ParameterStore* source = nullptr;
    if (store.rank() == shard) {
      source = &store;
    } else if (replica != nullptr && replica->rank() == shard && replica_promoted_) {
      source = replica.get();
    }
    if (source == nullptr) {
      // E.g. the copy's promotion is not installed yet: the next heartbeat answer asks again.
      LOG(WARNING) << "server " << rank << ": the scheduler asks for final shard " << shard
                   << ", which this server does not serve (yet)";
      continue;
    }
    FinalShard request;
    request.set_server_rank(rank);
    request.set_shard(shard);
    for (TensorChunk& chunk : source->Snapshot()) {
      FinalShard::Chunk* out = request.add_chunks();
      out->set_tensor_id(chunk.tensor_id());
      out->set_offset(chunk.offset());
      out->set_length(chunk.length());
      out->set_data(std::move(*chunk.mutable_data()));
    }
    const absl::Status sent = client->SubmitFinalShard(request);
    if (absl::IsInvalidArgument(sent)) {
      return ReportFatal(client, rank,
                         absl::Status(sent.code(), absl::StrCat("server ", rank, ": final shard ", shard,
                                                                " refused: ", sent.message())));
    }
    if (!sent.ok()) {
      LOG(WARNING) << "server " << rank << ": cannot send final shard " << shard
                   << " (the next heartbeat asks again): " << sent;
      continue;
    }
    LOG(INFO) << "server " << rank << ": sent final shard " << shard << " (" << request.chunks_size()
              << " chunks, step " << source->step() << ") to the scheduler";
  }
  return absl::OkStatus();
}

absl::Status ServerRunner::ReportCheckpoints(SchedulerClient* client, int rank, const std::string& checkpoint_dir) {
  const std::vector<int64_t> steps = ListCheckpointSteps(checkpoint_dir, rank);
  int64_t keep_from = -1;
  const absl::Status status = client->ReportCheckpoints(rank, steps, &keep_from);
  if (status.ok()) keep_from_->store(keep_from < 0 ? std::numeric_limits<int64_t>::max() : keep_from);
  if (!status.ok()) {
    LOG(WARNING) << "server " << rank << ": cannot report its checkpoints [" << absl::StrJoin(steps, ", ")
                 << "]: " << status;
  } else {
    VLOG(1) << "server " << rank << ": reported checkpoints [" << absl::StrJoin(steps, ", ") << "]";
  }
  return status;
}

absl::Status ServerRunner::ReportFatal(SchedulerClient* client, int rank, absl::Status status) {
  LOG(ERROR) << status;
  const absl::Status reported = client->ReportFailure(SERVER, rank, status.ToString());
  if (!reported.ok()) LOG(WARNING) << "could not report the failure to the scheduler: " << reported;
  return status;
}

void ServerRunner::NoteCheckpointsChanged() {
  absl::MutexLock lock(&mu_);
  checkpoints_changed_ = true;
}

void ServerRunner::NoteMembershipEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  membership_hint_ = std::max(membership_hint_, epoch);
}

void ServerRunner::NoteFinalShardsWanted(const HeartbeatResponse& answer) {
  if (answer.send_final_shards_size() == 0) return;
  absl::MutexLock lock(&mu_);
  final_shards_wanted_.assign(answer.send_final_shards().begin(), answer.send_final_shards().end());
}

void ServerRunner::NoteQuietCutWanted(int64_t step) {
  if (step <= 0) return;
  absl::MutexLock lock(&mu_);
  quiet_cut_wanted_ = step;
}

void ServerRunner::WriteQuietCut(ParameterStore* store, int64_t step) {
  const absl::Status status = store->CheckpointAt(step);
  if (!status.ok()) {
    LOG(WARNING) << status << "; written when asked again";
    absl::MutexLock lock(&mu_);
    if (quiet_cut_wanted_ == step) quiet_cut_wanted_ = quiet_cut_written_;  // asked again by the next answer
    return;
  }
  LOG(INFO) << "server " << store->rank() << ": wrote the quiet cut of step " << step
            << " for the change of the server count";
  absl::MutexLock lock(&mu_);
  quiet_cut_written_ = std::max(quiet_cut_written_, step);
}

void ServerRunner::EndJob(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (job_ended_) return;
  job_ended_ = true;
  job_status_ = std::move(status);
}

void ServerRunner::Stop() {
  absl::MutexLock lock(&mu_);
  if (may_drain_ && !drain_wanted_) {
    drain_wanted_ = true;
    return;
  }
  stop_requested_ = true;
}

void ServerRunner::NoteMapRestored(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  map_restored_epoch_ = std::max(map_restored_epoch_, epoch);
}

bool ServerRunner::SchedulerLost() const {
  absl::MutexLock lock(&mu_);
  return job_ended_ && absl::IsUnavailable(job_status_);
}

bool ServerRunner::stopped() const {
  absl::MutexLock lock(&mu_);
  return stop_requested_;
}

int ServerRunner::port() const {
  absl::MutexLock lock(&mu_);
  return port_;
}

}  // namespace pstrain::server
