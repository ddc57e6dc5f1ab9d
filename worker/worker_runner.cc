#include "worker/worker_runner.h"

#include <memory>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/barriers.h"
#include "common/health.h"
#include "common/job_spec.h"
#include "common/scheduler_client.h"
#include "common/status_macros.h"
#include "data/idx_reader.h"
#include "model/device.h"
#include "model/model.h"
#include "model/model_file.h"
#include "worker/ps_client.h"
#include "worker/trainer.h"

namespace pstrain::worker {
namespace {

// Holds the first reason the job ended badly, whoever noticed it first.
class Outcome {
 public:
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (first_.ok()) first_ = std::move(status);
  }
  absl::Status first() {
    absl::MutexLock lock(&mu_);
    return first_;
  }

 private:
  absl::Mutex mu_;
  absl::Status first_ ABSL_GUARDED_BY(mu_);
};

absl::Status Train(const WorkerOptions& options, SchedulerClient* scheduler, int rank,
                   const RegisterResponse& registration, model::Backend* backend, Outcome* outcome) {
  // As a server does: fields a scheduler left unset take their defaults, and a job that is not
  // valid stops here with the field named, not somewhere in training.
  JobSpec job = registration.job();
  ApplyJobDefaults(&job);
  if (absl::Status valid = ValidateJobSpec(job); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the job from the scheduler: ", valid.message()));
  }
  ASSIGN_OR_RETURN(ClusterView view, scheduler->WaitUntilRunning(options.startup_timeout));
  ASSIGN_OR_RETURN(data::Dataset train,
                   data::LoadFashionMnist(job.data().data_dir(), data::Split::kTrain, job.data().train_limit()));
  ASSIGN_OR_RETURN(data::Dataset test,
                   data::LoadFashionMnist(job.data().data_dir(), data::Split::kTest, job.data().test_limit()));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                   model::NewModel(job.model(),
                                   model::ImageModelInput(train.rows, train.cols, train.num_classes,
                                                          {job.hidden_sizes().begin(), job.hidden_sizes().end()}),
                                   backend));
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> ps, PsClient::Create(view, options.rpc_timeout, /*unix_sockets=*/true,
                                                                             options.tcp_connections));

  // From here on, a failed job cancels whatever this worker is waiting for.
  Heartbeater heartbeater(
      scheduler, WORKER, rank, absl::Milliseconds(registration.heartbeat_ms()),
      absl::Milliseconds(registration.dead_after_ms()), [&ps, outcome](absl::Status end) {
        if (end.ok()) return;
        outcome->Fail(end);
        ps->CancelAll(std::string(end.message()));
      });

  RETURN_IF_ERROR(scheduler->Barrier(kServersReadyBarrier, BarrierRequest::ALL, WORKER, rank, options.startup_timeout));
  SessionOptions trainer_options;
  trainer_options.rank = rank;
  trainer_options.job = job;
  trainer_options.view = view;
  trainer_options.leave = options.leave;
  if (!job.final_model_path().empty()) {
    // The scheduler writes the final model (this worker's files may not outlive it, e.g. in a
    // pod). The first live worker sends it (worker 0 may have died on the way), before its last
    // report, so the job finishes only once the file is written. Should two see different views
    // here, both send the same weights and the scheduler writes the first.
    trainer_options.before_done = [&](absl::Span<const float> weights) -> absl::Status {
      ASSIGN_OR_RETURN(ClusterView final_view, scheduler->GetClusterView());
      if (final_view.workers_size() == 0 || final_view.workers(0).rank() != rank) return absl::OkStatus();
      ASSIGN_OR_RETURN(std::string bytes, model::SerializeModelFile(model->params(), weights));
      const size_t size = bytes.size();
      RETURN_IF_ERROR(scheduler->SubmitFinalModel(rank, std::move(bytes)));
      LOG(INFO) << "sent the final model (" << size << " bytes) to the scheduler, which wrote it to "
                << job.final_model_path();
      return absl::OkStatus();
    };
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                   Trainer::Create(trainer_options, scheduler, ps.get(), model.get(), &train, &test));
  return trainer->Run();
}

}  // namespace

absl::Status RunWorker(const WorkerOptions& options) {
  // Before registering: a bad or missing device ends this worker without touching the job.
  ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> backend,
                   model::NewBackendForDevice(options.device, options.allow_tf32));
  LOG(INFO) << "computing on " << backend->name() << (options.allow_tf32 ? " (TF32 allowed)" : "");
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerClient> scheduler,
                   SchedulerClient::Create(options.scheduler_address, absl::Seconds(10)));
  std::unique_ptr<HealthServer> health;
  if (options.health_port > 0) {
    ASSIGN_OR_RETURN(health, HealthServer::Start(options.health_host, options.health_port));
    LOG(INFO) << "health service on " << JoinHostPort(options.health_host, health->port());
  }
  absl::StatusOr<RegisterResponse> registered = scheduler->Register(WORKER, "", options.startup_timeout);
  if (!registered.ok()) {
    if (absl::IsAborted(registered.status())) {
      LOG(ERROR) << "the job failed before this worker joined: " << registered.status().message();
    }
    return registered.status();
  }
  const RegisterResponse& registration = *registered;
  if (registration.job_state() == FINISHED) {
    // E.g. an orchestrator restarted this worker after the end: there is nothing left to do.
    LOG(INFO) << "the job is over (FINISHED); nothing to do";
    return absl::OkStatus();
  }
  const int rank = registration.rank();
  LOG(INFO) << "registered as worker " << rank << " with the scheduler at " << options.scheduler_address;
  if (health != nullptr) health->SetServing(true);

  Outcome outcome;
  absl::Status status = Train(options, scheduler.get(), rank, registration, backend.get(), &outcome);
  if (health != nullptr) health->SetServing(false);
  // A failure seen by the heartbeat explains a cancelled call better than the cancellation does.
  absl::Status cause = outcome.first();
  if (!status.ok() && !cause.ok()) status = cause;
  if (!status.ok() && !absl::IsAborted(status)) {
    // Tell the scheduler so the whole job fails now rather than at the heartbeat timeout.
    absl::Status reported = scheduler->ReportFailure(WORKER, rank, std::string(status.message()));
    if (!reported.ok()) VLOG(1) << "could not report the failure: " << reported;
  }
  return status;
}

}  // namespace pstrain::worker
