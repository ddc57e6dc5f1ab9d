#include "worker/worker_runner.h"

#include <memory>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/barriers.h"
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

model::ModelInput ModelInputOf(const JobSpec& job, const data::Dataset& train) {
  model::ModelInput input;
  input.height = train.rows;
  input.width = train.cols;
  input.classes = train.num_classes;
  input.hidden_sizes.assign(job.hidden_sizes().begin(), job.hidden_sizes().end());
  return input;
}

absl::Status Train(const WorkerOptions& options, SchedulerClient* scheduler, int rank,
                   const RegisterResponse& registration, model::Backend* backend, Outcome* outcome) {
  const JobSpec& job = registration.job();
  ASSIGN_OR_RETURN(ClusterView view, scheduler->WaitUntilRunning(options.startup_timeout));
  ASSIGN_OR_RETURN(data::Dataset train,
                   data::LoadFashionMnist(job.data().data_dir(), data::Split::kTrain, job.data().train_limit()));
  ASSIGN_OR_RETURN(data::Dataset test,
                   data::LoadFashionMnist(job.data().data_dir(), data::Split::kTest, job.data().test_limit()));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                   model::NewModel(job.model(), ModelInputOf(job, train), backend));
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> ps, PsClient::Create(view, options.rpc_timeout));

  // From here on, a failed job cancels whatever this worker is waiting for.
  Heartbeater heartbeater(
      scheduler, WORKER, rank, absl::Milliseconds(registration.heartbeat_ms()),
      absl::Milliseconds(registration.dead_after_ms()), [&ps, outcome](absl::Status end) {
        if (end.ok()) return;
        outcome->Fail(end);
        ps->CancelAll(std::string(end.message()));
      });

  RETURN_IF_ERROR(scheduler->Barrier(kServersReadyBarrier, BarrierRequest::ALL, WORKER, rank, options.startup_timeout));
  TrainerOptions trainer_options;
  trainer_options.rank = rank;
  trainer_options.job = job;
  trainer_options.view = view;
  trainer_options.leave = options.leave;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                   Trainer::Create(trainer_options, scheduler, ps.get(), model.get(), &train, &test));
  RETURN_IF_ERROR(trainer->Run());
  if (trainer->left() || job.final_model_path().empty()) return absl::OkStatus();
  // The first live worker writes the model (worker 0 may have died on the way). Should two see
  // different views here, both write the same weights, each atomically.
  ASSIGN_OR_RETURN(ClusterView final_view, scheduler->GetClusterView());
  if (final_view.workers_size() > 0 && final_view.workers(0).rank() == rank) {
    RETURN_IF_ERROR(model::WriteModelFile(job.final_model_path(), model->params(), trainer->weights()));
    LOG(INFO) << "wrote the final model to " << job.final_model_path();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunWorker(const WorkerOptions& options) {
  // Before registering: a bad or missing device ends this worker without touching the job.
  ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> backend,
                   model::NewBackendForDevice(options.device, options.allow_tf32));
  LOG(INFO) << "computing on " << backend->name() << (options.allow_tf32 ? " (TF32 allowed)" : "");
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerClient> scheduler,
                   SchedulerClient::Create(options.scheduler_address, absl::Seconds(10)));
  ASSIGN_OR_RETURN(RegisterResponse registration, scheduler->Register(WORKER, "", options.startup_timeout));
  const int rank = registration.rank();
  LOG(INFO) << "registered as worker " << rank << " with the scheduler at " << options.scheduler_address;

  Outcome outcome;
  absl::Status status = Train(options, scheduler.get(), rank, registration, backend.get(), &outcome);
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
