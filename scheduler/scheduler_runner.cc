#include "scheduler/scheduler_runner.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/file_io.h"
#include "transport/health.h"
#include "common/job_spec.h"
#include "common/malloc_tuning.h"
#include "common/server_counts.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/build_fingerprint.h"
#include "model/model_file.h"
#include "scheduler/dashboard_http.h"
#include "scheduler/job_setup.h"
#include "scheduler/resume.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/state_file.h"
#include "scheduler/stream_feed.h"
#include "common/listen_error.h"

namespace pstrain {
namespace scheduler {
namespace {

// What the scheduler sends is ours: a cluster view carries the whole shard map; leave ample room.
constexpr int kMaxSendBytes = 1 << 30;

// The largest request the job can legitimately send the scheduler: a model file (DeclareModel) of
// the job's model, or a server's share of it (SubmitFinalShard), i.e. its floats and a header per tensor, plus an
// eighth and 1 MiB for every other field and message (heartbeats, progress reports: small). An external model's size is
// unknown until it is declared, so `max_model_bytes` stands for it. The listener applies it as gRPC's receive limit:
// the job is known before the scheduler listens.
int64_t MaxRequestBytes(const JobSpec& job, const ShardMap& shard_map, int64_t max_model_bytes) {
  int64_t model = 0;
  if (IsExternalModel(job)) {
    model = max_model_bytes;
  } else {
    for (const TensorSpec& t : shard_map.tensors()) {
      model += 4 * t.num_elements() + static_cast<int64_t>(t.name().size()) + 16 * t.shape_size() + 64;
    }
  }
  return std::min<int64_t>(model + model / 8 + (1 << 20), std::numeric_limits<int>::max());
}

// What gRPC may hold for the scheduler's port at once (a ResourceQuota: read buffers and requests
// in flight): two requests of the job's largest size and 16 MiB for every small call. gRPC reads a
// request in full before it checks it against the receive limit, so without this bound 4 calls of
// 256 MiB took the scheduler to 927 MB whatever the limit; past the quota gRPC resets calls
// instead (RST_STREAM ENHANCE_YOUR_CALM, RESOURCE_EXHAUSTED at the client; members retry them,
// scheduler/client/scheduler_client.cc).
size_t MemoryQuotaBytes(int64_t max_request_bytes) { return 2 * max_request_bytes + (16 << 20); }
// Calls one connection may have open at once: a member parks a few (cluster view, barrier) and
// makes one or two more; a connection with more is not a member's.
constexpr int kMaxStreamsPerConnection = 64;
// After a burst of calls past the quota, glibc keeps what gRPC freed (common/malloc_tuning.h):
// the watchdog hands it back once the process has grown this much (FreedMemoryReturner).
constexpr int64_t kTrimAfterGrowthBytes = 16 << 20;

// Hands freed memory back (ReturnFreedMemoryToSystem) when the process has grown by
// kTrimAfterGrowthBytes since the last time, and again on the 3 seconds after that: what the
// refused calls still held at the first time is freed by then. Costs a read of /proc per tick.
class FreedMemoryReturner {
 public:
  void Tick() {
    const int64_t resident = ResidentMemoryBytes();
    const absl::Time now = absl::Now();
    if (resident > after_trim_ + kTrimAfterGrowthBytes) {
      follow_ups_ = 3;
    } else if (follow_ups_ == 0 || now < next_follow_up_) {
      return;
    } else {
      --follow_ups_;
    }
    ReturnFreedMemoryToSystem();
    after_trim_ = ResidentMemoryBytes();
    next_follow_up_ = now + absl::Seconds(1);
    VLOG(1) << "scheduler: returned freed memory: resident " << resident << " -> " << after_trim_ << " bytes";
  }

 private:
  int64_t after_trim_ = ResidentMemoryBytes();
  int follow_ups_ = 0;
  absl::Time next_follow_up_;
};

// How often the watchdog looks at heartbeats and the stop flag.
constexpr absl::Duration kTick = absl::Milliseconds(100);

// A job on a data stream: a thread that takes in newly ready files every `every` (listing the folder
// and counting a new file's records may take a while, so not on the watchdog's thread) until it is
// destroyed.
class StreamPoller {
 public:
  StreamPoller(Scheduler* core, absl::Duration every)
      : thread_([this, core, every] {
          while (!done_.WaitForNotificationWithTimeout(every)) core->RefreshStream();
        }) {}
  ~StreamPoller() {
    done_.Notify();
    thread_.join();
  }

 private:
  absl::Notification done_;
  std::thread thread_;  // last: starts once done_ exists
};

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("scheduler options: ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerRunner>> SchedulerRunner::Create(JobSpec job, Options options) {
  ApplyJobDefaults(&job);
  RETURN_IF_ERROR(ValidateJobSpec(job));
  if (options.host.empty()) return Invalid("host is empty, expected a name or address");
  if (options.port < 0 || options.port > 65535) {
    return Invalid(absl::StrCat("port is ", options.port, ", expected 0..65535"));
  }
  if (options.health_port < 0 || options.health_port > 65535) {
    return Invalid(absl::StrCat("health port is ", options.health_port, ", expected 0..65535 (0: none)"));
  }
  if (options.http_port < -1 || options.http_port > 65535) {
    return Invalid(
        absl::StrCat("http port is ", options.http_port, ", expected -1..65535 (0: off, -1: any free port)"));
  }
  if (options.http_port != 0 && options.http_host.empty()) {
    return Invalid("http host is empty, expected an address to serve the dashboard on");
  }
  if (options.health_port > 0 && options.health_host.empty()) {
    return Invalid("health host is empty, expected an address to listen on");
  }
  if (options.heartbeat_interval <= absl::ZeroDuration() || options.startup_timeout <= absl::ZeroDuration()) {
    return Invalid(absl::StrCat("heartbeat interval ", absl::FormatDuration(options.heartbeat_interval),
                                " and startup timeout ", absl::FormatDuration(options.startup_timeout),
                                " must be > 0"));
  }
  if (options.server_recovery_timeout <= absl::ZeroDuration()) {
    return Invalid(absl::StrCat("server recovery timeout is ", absl::FormatDuration(options.server_recovery_timeout),
                                ", expected > 0"));
  }
  if (!options.state_dir.empty() && options.reconnect < options.dead_after) {
    return Invalid(absl::StrCat("scheduler reconnect time is ", absl::FormatDuration(options.reconnect),
                                ", expected at least dead_after (", absl::FormatDuration(options.dead_after), ")"));
  }
  if (options.max_model_bytes <= 0 || options.max_model_bytes >= (int64_t{1} << 31)) {
    return Invalid(absl::StrCat("max model bytes is ", options.max_model_bytes, ", expected 1..2^31-1"));
  }
  if (options.stream_poll <= absl::ZeroDuration()) {
    return Invalid(
        absl::StrCat("stream poll interval is ", absl::FormatDuration(options.stream_poll), ", expected > 0"));
  }
  if (options.progressive_window_files < 1) {
    return Invalid(absl::StrCat("progressive window is ", options.progressive_window_files, " files, expected >= 1"));
  }
  if (options.linger < absl::ZeroDuration()) {
    return Invalid(absl::StrCat("linger is ", absl::FormatDuration(options.linger), ", expected >= 0"));
  }
  if (options.hold_up_after < absl::ZeroDuration()) {
    return Invalid(absl::StrCat("hold_up_after is ", absl::FormatDuration(options.hold_up_after),
                                ", expected >= 0 (0: dead_after)"));
  }
  if (options.dead_after <= options.heartbeat_interval) {
    return Invalid(absl::StrCat("dead_after is ", absl::FormatDuration(options.dead_after),
                                ", expected more than the heartbeat interval ",
                                absl::FormatDuration(options.heartbeat_interval)));
  }
  return std::unique_ptr<SchedulerRunner>(new SchedulerRunner(std::move(job), std::move(options)));
}

void SchedulerRunner::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

bool SchedulerRunner::stop_requested() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

absl::Status SchedulerRunner::Run() {
  if (stop_requested()) return absl::CancelledError("scheduler stopped before it started");
  LOG(INFO) << "job: " << JobSpecToText(job_);
  // With a state folder the state persists; a state left there by a dead scheduler is restored.
  std::unique_ptr<StateFile> state_file;
  std::optional<SchedulerState> saved;
  int port = options_.port;
  if (!options_.state_dir.empty()) {
    ASSIGN_OR_RETURN(state_file, StateFile::Open(options_.state_dir));
    ASSIGN_OR_RETURN(saved, state_file->Load());
    if (saved.has_value() && port == 0) port = saved->port();  // Where the roles look for us.
    LOG(INFO) << (saved.has_value() ? "restoring the scheduler state from " : "keeping the scheduler state in ")
              << state_file->path();
  }
  JobSpec job = job_;
  std::optional<int64_t> resume_step;
  int resume_servers = 0;
  std::vector<ServerCountEra> server_counts = {{0, job.num_servers()}};
  if (job.resume() && job.mode() != SYNC) {
    // ASYNC and SSP servers checkpoint at their own update counts: no common cut to go back to.
    // The scheduler's saved state says which records were trained (its lease pool, and a stream's
    // catalog); each server comes back from its newest checkpoint, as a replaced one does.
    if (!saved.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "resume: mode is ", ModeName(job.mode()), ": an ", ModeName(job.mode()),
          " job goes on from its scheduler's saved state, whose leases say which records were trained (its "
          "servers' checkpoints form no common cut); expected the first run's --state_dir",
          options_.state_dir.empty() ? " (none given)" : absl::StrCat(", but ", options_.state_dir, " holds none")));
    }
    LOG(INFO) << "resume: going on from the scheduler state in " << options_.state_dir
              << "; each server restores its newest checkpoint in " << job.checkpoint_dir();
  } else if (job.resume()) {
    ASSIGN_OR_RETURN(const ResumePoint point, FindResumePoint(job));
    if (point.global_batch != job.global_batch()) {
      LOG(INFO) << "resume: keeping the first run's global batch " << point.global_batch << " (not "
                << job.global_batch() << ")";
    }
    job.set_global_batch(point.global_batch);
    resume_step = point.step;
    resume_servers = point.num_servers;
    server_counts = point.server_counts;
    LOG(INFO) << "resume: continuing from step " << point.step << ", the newest checkpoint every server has in "
              << job.checkpoint_dir()
              << (point.num_servers == job.num_servers()
                      ? std::string()
                      : absl::StrCat("; it was taken on ", point.num_servers, " servers, and the ", job.num_servers(),
                                     " servers of this run re-shard it as they restore it"));
  }
  if (!job.resume() && !saved.has_value() && !job.checkpoint_dir().empty()) {
    // A new job must not mix its checkpoints with an earlier one's (a recovery would pick the
    // earlier run's newer steps, and pruning would keep them over the new run's).
    RETURN_IF_ERROR(CheckNoEarlierCheckpoints(job));
  }
  if (!job.checkpoint_dir().empty()) {
    if (!job.resume() && saved.has_value()) {
      // A restarted scheduler of a running job keeps the folder's history as it is.
      ASSIGN_OR_RETURN(server_counts, ReadServerCounts(job.checkpoint_dir(), job.num_servers()));
    }
    RETURN_IF_ERROR(WriteJobManifest(job));
    RETURN_IF_ERROR(WriteServerCounts(job.checkpoint_dir(), server_counts, OutputMode(job.output_mode())));
  }
  ASSIGN_OR_RETURN(JobSetup setup, SetUpJob(job));
  if (IsExternalModel(job)) {
    LOG(INFO) << "model " << setup.model_line << "; data set sizes "
              << (setup.train_samples > 0 ? absl::StrCat(setup.train_samples, " training") : "declared") << " and "
              << (setup.test_samples > 0 ? absl::StrCat(setup.test_samples, " test") : "declared") << " samples";
  } else if (IsStreamJob(job)) {
    LOG(INFO) << "model " << setup.model_line << " in " << setup.shard_map.chunks_size() << " chunks over "
              << job_.num_servers() << " servers; data: the stream's files, taken in as they are ready";
  } else {
    LOG(INFO) << "data: " << setup.train_samples << " training and " << setup.test_samples << " test samples; model "
              << setup.model_line << " in " << setup.shard_map.chunks_size() << " chunks over " << job_.num_servers()
              << " servers; " << setup.total_steps << " steps";
  }

  Scheduler::Options core_options;
  core_options.job = job;
  core_options.resume_step = resume_step;
  core_options.resume_servers = resume_servers;
  core_options.build_fingerprint = model::BuildFingerprint();
  const int64_t max_request_bytes = MaxRequestBytes(job, setup.shard_map, options_.max_model_bytes);
  core_options.shard_map = std::move(setup.shard_map);
  core_options.train_samples = setup.train_samples;
  core_options.test_samples = setup.test_samples;
  core_options.total_steps = setup.total_steps;
  core_options.progressive_window_files = options_.progressive_window_files;
  core_options.heartbeat_interval = options_.heartbeat_interval;
  core_options.dead_after = options_.dead_after;
  core_options.hold_up_after = options_.hold_up_after;
  // A barrier normally opens within a few heartbeats; much longer is worth naming who is missing.
  core_options.stuck_barrier_after = std::max(absl::Seconds(10), 4 * options_.heartbeat_interval);
  core_options.startup_timeout = options_.startup_timeout;
  core_options.server_recovery_timeout = options_.server_recovery_timeout;
  if (!job.final_model_path().empty()) {
    core_options.write_final_model = [path = job.final_model_path(),
                                      mode = OutputMode(job.output_mode())](absl::string_view bytes) -> absl::Status {
      // Never write garbage: the bytes must be a whole, checksummed model file.
      RETURN_IF_ERROR(model::ParseModelFile(bytes, "the final model").status());
      return WriteFileAtomically(path, "final model", bytes, mode);
    };
  }
  if (!job.checkpoint_dir().empty()) {
    // A change of the server count starts a new era of the folder's history.
    core_options.record_server_count = [job](int64_t step, int servers) -> absl::Status {
      ASSIGN_OR_RETURN(const std::vector<ServerCountEra> eras,
                       ReadServerCounts(job.checkpoint_dir(), job.num_servers()));
      return WriteServerCounts(job.checkpoint_dir(), ContinueFrom(eras, step, servers), OutputMode(job.output_mode()));
    };
  }
  if (IsStreamJob(job) && !job.checkpoint_dir().empty()) {
    core_options.record_stream = [job](const StreamState& catalog) { return WriteStreamCatalog(job, catalog); };
    if (job.resume() && !saved.has_value()) {
      // The positions as the first run took them, whatever files a writer has removed since.
      ASSIGN_OR_RETURN(core_options.stream, ReadStreamCatalog(job));
      const StreamFeed feed(job.data().stream_dir(), job.global_batch(), core_options.stream);
      core_options.train_samples = feed.records();
      core_options.total_steps = feed.trainable_steps();
      LOG(INFO) << "resume: the data stream's catalog from " << job.checkpoint_dir() << " ("
                << core_options.stream.files_size() << " files)";
    }
  }
  if (IsExternalModel(job) && !job.checkpoint_dir().empty()) {
    core_options.record_declaration = [job](absl::string_view model_file, const TableList& tables) {
      return WriteDeclaration(job, model_file, tables);
    };
  }
  if (state_file != nullptr) {
    core_options.persist = [file = state_file.get()](int64_t version, const SchedulerState& state) {
      return file->Save(version, state);
    };
    core_options.reconnect = options_.reconnect;
    if (IsExternalModel(job)) {
      core_options.save_declared_model = [file = state_file.get()](absl::string_view bytes) {
        return file->SaveDeclaredModel(bytes);
      };
      if (saved.has_value() && saved->has_declared_model()) {
        ASSIGN_OR_RETURN(core_options.declared_model_file, state_file->LoadDeclaredModel());
        LOG(INFO) << "restoring the model declared by worker " << saved->declared_model().worker_rank() << " from "
                  << state_file->declared_model_path();
      }
    }
  }
  std::unique_ptr<Scheduler> core;
  if (saved.has_value()) {
    ASSIGN_OR_RETURN(core, Scheduler::Restore(std::move(core_options), *saved));
  } else {
    ASSIGN_OR_RETURN(core, Scheduler::Create(std::move(core_options)));
  }

  std::optional<StreamPoller> stream_poller;
  if (IsStreamJob(job)) {
    core->RefreshStream();  // the files ready now, before the first view goes out
    stream_poller.emplace(core.get(), options_.stream_poll);
  }

  // The dashboard. Declared after the core, so it stops (destruction) before the core goes. It
  // binds before the scheduler's own port: that one may be 0 (any free port), and the kernel could
  // otherwise hand it the very port the dashboard was given (a launcher's or a test's pick).
  metrics::Registry own_registry;
  metrics::Registry* registry = options_.metrics != nullptr ? options_.metrics : &own_registry;
  SchedulerMetrics scheduler_metrics(registry);
  scheduler_metrics.Attach(core.get());
  DashboardApi dashboard(core.get(), registry);
  std::unique_ptr<HttpServer> http;
  if (options_.http_port != 0) {
    absl::StatusOr<std::unique_ptr<HttpServer>> started =
        HttpServer::Start(options_.http_host, std::max(options_.http_port, 0), dashboard.Routes());
    if (!started.ok()) {
      core->Fail(absl::IsUnavailable(started.status())
                     ? CannotListen("dashboard", JoinHostPort(options_.http_host, options_.http_port), "http_port")
                     : started.status());
    } else {
      http = *std::move(started);
      http_port_.store(http->port());
      LOG(INFO) << "dashboard at http://" << http->address() << "/";
      if (!options_.http_port_file.empty()) {
        absl::Status written =
            WriteFileAtomically(options_.http_port_file, "http port file", absl::StrCat(http->port(), "\n"));
        if (!written.ok()) core->Fail(written);
      }
    }
  }

  // NOT_SERVING until the main server listens.
  ASSIGN_OR_RETURN(std::unique_ptr<HealthServer> health,
                   StartHealthListener(options_.health_host, options_.health_port));
  // Declared before the server, so the server (which borrows it) goes first.
  SchedulerService service(core.get());
  const std::string address = JoinHostPort(options_.host, port);
  int selected_port = 0;
  EnableHealthService();
  const TransportSecurity& security =
      options_.security != nullptr ? *options_.security : *TransportSecurity::Loopback();
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, security.ServerCredentials(address, &service));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, credentials, &selected_port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_request_bytes));
  builder.SetMaxSendMessageSize(kMaxSendBytes);
  grpc::ResourceQuota quota("scheduler port");
  quota.Resize(MemoryQuotaBytes(max_request_bytes));
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || selected_port == 0) {
    return CannotListen("scheduler", address, "port");
  }
  SetServing(server.get(), health.get(), true);
  if (state_file != nullptr) {
    // Also the first save of a fresh job's state.
    if (absl::Status s = core->RecordPort(selected_port); !s.ok()) core->Fail(s);
  }
  if (saved.has_value()) {
    LOG(INFO) << "scheduler listening on " << options_.host << ":" << selected_port
              << "; going on with the restored job (" << JobState_Name(core->state()) << ")";
  } else {
    LOG(INFO) << "scheduler listening on " << options_.host << ":" << selected_port << " (requests up to "
              << max_request_bytes << " bytes, " << MemoryQuotaBytes(max_request_bytes)
              << " bytes in flight); waiting for " << job_.num_servers() << " servers and " << job_.num_workers()
              << " workers";
  }
  if (!options_.port_file.empty()) {
    absl::Status written = WriteFileAtomically(options_.port_file, "port file", absl::StrCat(selected_port, "\n"));
    if (!written.ok()) core->Fail(written);
  }
  // Only now: whoever learns the port from port() finds the port file written too.
  port_.store(selected_port);
  if (http != nullptr) {
    MemberStatus self;
    self.role = "scheduler";
    self.address = JoinHostPort(options_.host, selected_port);
    self.metrics_address = options_.metrics_address.empty() ? http->address() : options_.metrics_address;
    self.state = "live";
    dashboard.SetSelf(std::move(self));
  }

  // Watchdog: dead roles, the startup timeout and Stop() end the job.
  bool stopped = false;
  FreedMemoryReturner returner;
  while (!core->AwaitEnd(kTick)) {
    core->CheckHealth();
    returner.Tick();
    if (stop_requested() && state_file != nullptr) {
      // The job goes on under a restarted scheduler: end nothing, save nothing more.
      SetServing(server.get(), health.get(), false);
      LOG(INFO) << "scheduler stopped; the job's state stays in " << state_file->path()
                << " for a scheduler started again with --state_dir=" << options_.state_dir;
      if (http != nullptr) http->Stop();
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server->Wait();
      return absl::CancelledError(
          absl::StrCat("scheduler stopped; the job goes on when a scheduler is started "
                       "again with --state_dir=",
                       options_.state_dir));
    }
    if (stop_requested()) {
      stopped = true;
      core->Fail(absl::CancelledError("scheduler stopped"));
    }
  }
  SetServing(server.get(), health.get(), false);

  absl::Status summary_written;
  if (!options_.summary_json.empty()) {
    summary_written =
        WriteFileAtomically(options_.summary_json, "run summary", core->SummaryJson(), OutputMode(job_.output_mode()));
    if (summary_written.ok()) {
      LOG(INFO) << "run summary written to " << options_.summary_json;
    } else {
      LOG(ERROR) << "run summary: " << summary_written;
    }
  }
  LOG(INFO) << core->OutcomeLine();
  if (state_file != nullptr) {
    LOG(INFO) << "the scheduler state was written " << state_file->writes() << " times to " << state_file->path();
  }

  // Servers learn the outcome from their next heartbeat; keep answering until all have asked, and
  // for the linger time, so that roles started after the end learn it too.
  const absl::Time grace_end = absl::Now() + 2 * options_.dead_after;
  const absl::Time linger_end = absl::Now() + options_.linger;
  if (options_.linger > absl::ZeroDuration()) {
    LOG(INFO) << "lingering for " << absl::FormatDuration(options_.linger)
              << " so that roles started late learn that the job is over";
  }
  while (!stopped && (absl::Now() < linger_end || (!core->ServersKnowTheEnd() && absl::Now() < grace_end))) {
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), kTick)) break;
  }
  // A server's heartbeat after the end carries its final traffic (the summary's "servers"), which
  // the first write may have missed by up to a heartbeat: write the summary again with it.
  if (!options_.summary_json.empty() && summary_written.ok() && core->ServersKnowTheEnd()) {
    summary_written =
        WriteFileAtomically(options_.summary_json, "run summary", core->SummaryJson(), OutputMode(job_.output_mode()));
    if (!summary_written.ok()) LOG(ERROR) << "run summary: " << summary_written;
  }
  if (http != nullptr) http->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->Wait();
  LOG(INFO) << "scheduler shut down";

  if (core->state() != FINISHED) return core->failure();
  return summary_written;
}

}  // namespace scheduler
}  // namespace pstrain
