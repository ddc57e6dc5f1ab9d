#include "worker/job_member.h"

#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/barriers.h"
#include "common/listen_error.h"
#include "transport/health.h"
#include "common/job_spec.h"
#include "common/metrics_endpoint.h"
#include "scheduler/client/scheduler_client.h"
#include "common/status_macros.h"
#include "model/build_fingerprint.h"
#include "model/model_file.h"
#include "worker/ps_client.h"

namespace pstrain::worker {

absl::StatusOr<std::unique_ptr<JobMember>> JobMember::Join(const MemberOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerClient> scheduler,
                   SchedulerClient::Create(options.scheduler_address, absl::Seconds(10), options.security));
  std::unique_ptr<JobMember> member(new JobMember(std::move(scheduler), options));
  if (options.health_port > 0) {
    ASSIGN_OR_RETURN(member->health_, HealthServer::Start(options.health_host, options.health_port));
    LOG(INFO) << "health service on " << JoinHostPort(options.health_host, member->health_->port());
  }
  std::string metrics_address = options.metrics_address;
  if (options.metrics == nullptr) {
    member->own_registry_ = std::make_unique<metrics::Registry>();
    if (options.metrics_port != 0) {
      if (options.metrics_port < -1 || options.metrics_port > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("metrics port ", options.metrics_port, ": expected -1 (any free port), 0 (none) or 1..65535"));
      }
      AddProcessMetrics(member->own_registry_.get());
      ASSIGN_OR_RETURN(member->metrics_server_, ServeMetrics(member->own_registry_.get(), options.metrics_host,
                                                             options.metrics_port == -1 ? 0 : options.metrics_port));
      if (metrics_address.empty()) {
        metrics_address =
            MetricsAddress(options.metrics_host, options.metrics_advertise_host, member->metrics_server_->port());
      }
      LOG(INFO) << "metrics at http://" << metrics_address << "/metrics";
    }
  }
  if (!metrics_address.empty()) member->scheduler_->set_metrics_address(metrics_address);
  member->scheduler_->set_build_fingerprint(model::BuildFingerprint());
  absl::StatusOr<RegisterResponse> registered = member->scheduler_->Register(WORKER, "", options.startup_timeout);
  if (!registered.ok()) {
    if (absl::IsAborted(registered.status())) {
      LOG(ERROR) << "the job failed before this worker joined: " << registered.status().message();
    }
    return registered.status();
  }
  if (registered->job_state() == FINISHED) {
    // E.g. an orchestrator restarted this worker after the end: there is nothing left to do.
    LOG(INFO) << "the job is over (FINISHED); nothing to do";
    member->finished_ = true;
    return member;
  }
  member->rank_ = registered->rank();
  member->heartbeat_ms_ = registered->heartbeat_ms();
  member->dead_after_ms_ = registered->dead_after_ms();
  // As a server does: fields a scheduler left unset take their defaults, and a job that is not
  // valid stops here with the field named, not somewhere in training.
  member->job_ = registered->job();
  ApplyJobDefaults(&member->job_);
  metrics::Registry* registry = options.metrics != nullptr ? options.metrics : member->own_registry_.get();
  registry->SetConstantLabels({{"role", "worker"}, {"rank", std::to_string(member->rank_)}});
  member->metrics_ = std::make_unique<WorkerMetrics>(registry, member->job_.num_servers());
  if (absl::Status valid = ValidateJobSpec(member->job_); !valid.ok()) {
    return member->Finish(absl::InvalidArgumentError(absl::StrCat("the job from the scheduler: ", valid.message())));
  }
  LOG(INFO) << "registered as worker " << member->rank_ << " with the scheduler at " << options.scheduler_address;
  if (member->health_ != nullptr) member->health_->SetServing(true);
  return member;
}

JobMember::JobMember(std::unique_ptr<SchedulerClient> scheduler, const MemberOptions& options)
    : options_(options), scheduler_(std::move(scheduler)) {}

JobMember::~JobMember() {
  // The heartbeat thread may cancel the client's calls: stop it first.
  heartbeater_.reset();
  ps_.reset();
}

absl::Status JobMember::DeclareModel(const std::vector<model::ParamSpec>& params,
                                     absl::Span<const float> initial_values, int64_t train_samples,
                                     int64_t test_samples, const std::vector<std::string>& averaged,
                                     const std::vector<TableSpec>& tables) {
  if (ps_ != nullptr) return absl::FailedPreconditionError("declare the model before the job starts, not after");
  ModelDeclaration declaration;
  declaration.set_worker_rank(rank_);
  ASSIGN_OR_RETURN(*declaration.mutable_model_file(), model::SerializeModelFile(params, initial_values));
  declaration.set_train_samples(train_samples);
  declaration.set_test_samples(test_samples);
  for (const std::string& name : averaged) declaration.add_averaged_tensors(name);
  for (const TableSpec& table : tables) *declaration.add_tables() = table;
  return scheduler_->DeclareModel(std::move(declaration));
}

absl::StatusOr<ClusterView> JobMember::Start() {
  ASSIGN_OR_RETURN(view_, scheduler_->WaitUntilRunning(options_.startup_timeout));
  // The tables the servers serve: a declared model's reach this worker only through the view.
  if (view_.tables_size() > 0) *job_.mutable_tables() = view_.tables();
  ASSIGN_OR_RETURN(ps_, PsClient::Create(view_, options_.rpc_timeout, /*unix_sockets=*/true, options_.tcp_connections,
                                         options_.security, scheduler_->session_credential()));
  ps_->set_traffic_meter(metrics_->traffic());
  // From here on, a failed job cancels whatever this worker is waiting for.
  heartbeater_ = std::make_unique<Heartbeater>(scheduler_.get(), WORKER, rank_, absl::Milliseconds(heartbeat_ms_),
                                               absl::Milliseconds(dead_after_ms_), [this](absl::Status end) {
                                                 {
                                                   absl::MutexLock lock(&mu_);
                                                   job_ended_ = true;
                                                   if (end.ok()) return;
                                                   if (outcome_.ok()) outcome_ = end;
                                                 }
                                                 ps_->CancelAll(std::string(end.message()));
                                               });
  RETURN_IF_ERROR(
      scheduler_->Barrier(kServersReadyBarrier, BarrierRequest::ALL, WORKER, rank_, options_.startup_timeout));
  return view_;
}

absl::StatusOr<std::unique_ptr<TrainingSession>> JobMember::NewSession(std::vector<model::ParamSpec> params) {
  if (ps_ == nullptr) return absl::FailedPreconditionError("the job has not started: call Start() first");
  SessionOptions options;
  options.rank = rank_;
  options.job = job_;
  options.view = view_;
  options.params = std::move(params);
  options.leave = options_.leave != nullptr ? options_.leave : &leave_;
  options.metrics = metrics_.get();
  // No final model is sent from here: the scheduler assembles it from the servers' shards once
  // every worker is done, so no worker (this one or an impostor) can replace it.
  return TrainingSession::Create(std::move(options), scheduler_.get(), ps_.get());
}

absl::Status JobMember::outcome() const {
  absl::MutexLock lock(&mu_);
  return outcome_;
}

absl::Status JobMember::AwaitJobEnd() {
  LOG(INFO) << "done; waiting for the job to end (the scheduler writes the final model from the servers' shards)";
  absl::MutexLock lock(&mu_);
  while (!job_ended_ && !LeaveRequested()) mu_.AwaitWithTimeout(absl::Condition(&job_ended_), absl::Milliseconds(100));
  if (!job_ended_) return absl::OkStatus();        // asked to leave: its part is done anyway
  if (absl::IsAborted(outcome_)) return outcome_;  // the job failed, e.g. the model could not be written
  if (!outcome_.ok()) LOG(WARNING) << "after this worker was done: " << outcome_;
  return absl::OkStatus();
}

absl::Status JobMember::Finish(absl::Status status) {
  if (status.ok() && !job_.final_model_path().empty() && heartbeater_ != nullptr && !LeaveRequested()) {
    status = AwaitJobEnd();
  }
  if (health_ != nullptr) health_->SetServing(false);
  // A failure seen by the heartbeat explains a cancelled call better than the cancellation does.
  const absl::Status cause = outcome();
  if (!status.ok() && !cause.ok()) status = cause;
  if (!status.ok() && !absl::IsAborted(status) && rank_ >= 0) {
    // Tell the scheduler so the whole job fails now rather than at the heartbeat timeout.
    absl::Status reported = scheduler_->ReportFailure(WORKER, rank_, std::string(status.message()));
    if (!reported.ok()) VLOG(1) << "could not report the failure: " << reported;
  }
  return status;
}

}  // namespace pstrain::worker
