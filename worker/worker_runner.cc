#include "worker/worker_runner.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "common/status_macros.h"
#include "data/idx_reader.h"
#include "model/device.h"
#include "model/model.h"
#include "common/table_spec.h"
#include "worker/ctr_workload.h"
#include "worker/image_workload.h"
#include "worker/job_member.h"
#include "worker/trainer.h"

namespace pstrain::worker {
namespace {

// Model "ctr": embedding tables and an MLP over streamed Criteo or libsvm records.
absl::Status TrainCtr(JobMember* member, model::Backend* backend) {
  const JobSpec& job = member->job();
  // The view (with the data sizes) comes with Start; the files are opened against it.
  ASSIGN_OR_RETURN(const ClusterView view, member->Start());
  ASSIGN_OR_RETURN(std::unique_ptr<CtrWorkload> workload, CtrWorkload::Create(job, view, backend));
  ASSIGN_OR_RETURN(std::unique_ptr<TrainingSession> session, member->NewSession(workload->params()));
  workload->FollowView(&session->view());
  Trainer trainer(std::move(session), workload.get());
  RETURN_IF_ERROR(trainer.Run());
  if (workload->skipped() > 0) LOG(WARNING) << "skipped " << workload->skipped() << " bad records (--bad_records=skip)";
  return absl::OkStatus();
}

absl::Status Train(const WorkerOptions& options, JobMember* member, model::Backend* backend) {
  const JobSpec& job = member->job();
  if (job.model() == kCtrModel) return TrainCtr(member, backend);
  ASSIGN_OR_RETURN(data::Dataset train,
                   data::LoadFashionMnist(job.data().data_dir(), data::Split::kTrain, job.data().train_limit()));
  ASSIGN_OR_RETURN(data::Dataset test,
                   data::LoadFashionMnist(job.data().data_dir(), data::Split::kTest, job.data().test_limit()));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                   model::NewModel(job.model(),
                                   model::ImageModelInput(train.rows, train.cols, train.num_classes,
                                                          {job.hidden_sizes().begin(), job.hidden_sizes().end()}),
                                   backend));
  RETURN_IF_ERROR(member->Start().status());
  ASSIGN_OR_RETURN(std::unique_ptr<TrainingSession> session, member->NewSession(model->params()));
  const int64_t largest = std::max<int64_t>(job.batch_size(), session->view().global_batch());
  ASSIGN_OR_RETURN(std::unique_ptr<ImageWorkload> workload,
                   ImageWorkload::Create(model.get(), &train, &test, session->view(), largest));
  Trainer trainer(std::move(session), workload.get());
  return trainer.Run();
}

}  // namespace

absl::Status RunWorker(const WorkerOptions& options) {
  // Before registering: a bad or missing device ends this worker without touching the job.
  ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> backend,
                   model::NewBackendForDevice(options.device, options.allow_tf32));
  LOG(INFO) << "computing on " << backend->name() << (options.allow_tf32 ? " (TF32 allowed)" : "");
  ASSIGN_OR_RETURN(std::unique_ptr<JobMember> member, JobMember::Join(options.member));
  if (member->finished()) return absl::OkStatus();
  return member->Finish(Train(options, member.get(), backend.get()));
}

}  // namespace pstrain::worker
