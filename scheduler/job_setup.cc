#include "scheduler/job_setup.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/ctr_model_options.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "data/assignment.h"
#include "common/table_spec.h"
#include "data/ctr_files.h"
#include "data/idx_reader.h"
#include "model/ctr_model.h"
#include "model/model.h"
#include "scheduler/scheduler.h"
#include "scheduler/shard_map.h"

namespace pstrain {
namespace scheduler {
namespace {

int64_t Limited(int64_t count, int64_t limit) { return limit > 0 ? std::min(count, limit) : count; }

// Model "ctr": the dense tensors of its MLP, from the job alone.
absl::StatusOr<std::vector<model::ParamSpec>> CtrParams(const JobSpec& job) {
  const model::CtrModelOptions options = CtrModelOptionsOf(job);
  RETURN_IF_ERROR(model::ValidateCtrModelOptions(options));
  return model::CtrDenseParamSpecs(options);
}

// An image model's tensors for images of `info`'s size and classes.
absl::StatusOr<std::vector<model::ParamSpec>> ImageParams(const JobSpec& job, const data::DatasetInfo& info) {
  const model::ModelInput input = model::ImageModelInput(info.rows, info.cols, info.num_classes,
                                                         {job.hidden_sizes().begin(), job.hidden_sizes().end()});
  return model::ModelParamSpecs(job.model(), input);
}

// A data stream's folder exists. No file is read here: the scheduler takes the ready files in
// (Scheduler::RefreshStream) before it serves, from where its saved state left off.
absl::Status CheckStreamDir(const JobSpec& job) {
  std::error_code ec;
  if (!std::filesystem::is_directory(job.data().stream_dir(), ec)) {
    return absl::NotFoundError(absl::StrCat("data stream '", job.data().stream_dir(), "': no such folder"));
  }
  return absl::OkStatus();
}

// Model "ctr" on a data stream: the MLP's tensors.
absl::StatusOr<JobSetup> SetUpStreamJob(const JobSpec& job) {
  RETURN_IF_ERROR(CheckStreamDir(job));
  JobSetup setup;
  ASSIGN_OR_RETURN(const std::vector<model::ParamSpec> params, CtrParams(job));
  setup.model_line = absl::StrCat(
      job.model(), ": ", job.tables_size(), " embedding tables of dim ", CtrShapeOf(job).dim, ", ", params.size(),
      " dense tensors, ", model::TotalElements(params), " dense parameters; data stream ", job.data().stream_dir());
  ASSIGN_OR_RETURN(setup.shard_map, BuildShardMap(TensorSpecsOf(params), job.num_servers(), job.max_chunk_bytes()));
  return setup;
}

// Model "ctr": the record counts of the text files (one streaming pass each) and the MLP's tensors.
absl::StatusOr<JobSetup> SetUpCtrJob(const JobSpec& job) {
  if (IsStreamJob(job)) return SetUpStreamJob(job);
  ASSIGN_OR_RETURN(const data::DataFormat format, data::ParseDataFormat(job.data().format()));
  ASSIGN_OR_RETURN(const data::CtrFiles files, data::FindCtrFiles(job.data().data_dir(), format));
  data::RecordCounter counter;
  ASSIGN_OR_RETURN(const int64_t train, counter.Count(files.train));
  ASSIGN_OR_RETURN(const int64_t test, counter.Count(files.test));
  JobSetup setup;
  setup.train_samples = Limited(train, job.data().train_limit());
  setup.test_samples = Limited(test, job.data().test_limit());
  if (setup.train_samples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training file ", files.train, ": no records, expected at least one"));
  }
  const CtrShape shape = CtrShapeOf(job);
  ASSIGN_OR_RETURN(const std::vector<model::ParamSpec> params, CtrParams(job));
  setup.model_line =
      absl::StrCat(job.model(), ": ", job.tables_size(), " embedding tables of dim ", shape.dim, ", ", params.size(),
                   " dense tensors, ", model::TotalElements(params), " dense parameters; data ", files.train, " (",
                   setup.train_samples, " records), ", files.test, " (", setup.test_samples, ")");
  ASSIGN_OR_RETURN(setup.shard_map, BuildShardMap(TensorSpecsOf(params), job.num_servers(), job.max_chunk_bytes()));
  setup.total_steps =
      TotalSteps(job, setup.train_samples, data::SyncStepsPerEpoch(setup.train_samples, job.global_batch()));
  return setup;
}

}  // namespace

absl::StatusOr<JobSetup> SetUpJob(const JobSpec& job) {
  if (job.model() == kCtrModel) return SetUpCtrJob(job);
  if (IsExternalModel(job)) {
    // The workers declare the model and the sizes (declared_model.h); the data is theirs, or the
    // stream's.
    if (IsStreamJob(job)) RETURN_IF_ERROR(CheckStreamDir(job));
    JobSetup setup;
    setup.train_samples = job.data().train_samples();
    setup.test_samples = job.data().test_samples();
    setup.model_line = absl::StrCat(job.model(), ": declared by the first worker to call DeclareModel");
    return setup;
  }
  const std::string& dir = job.data().data_dir();
  ASSIGN_OR_RETURN(const data::DatasetInfo train,
                   data::ReadDatasetInfo(dir, data::Split::kTrain, job.data().train_limit()));
  ASSIGN_OR_RETURN(const data::DatasetInfo test,
                   data::ReadDatasetInfo(dir, data::Split::kTest, job.data().test_limit()));
  if (train.num_samples <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("training set in ", dir, ": no samples, expected at least one"));
  }
  if (train.rows != test.rows || train.cols != test.cols || train.num_classes != test.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data in ", dir, ": training images are ", train.rows, "x", train.cols, " with ", train.num_classes,
        " classes but test images are ", test.rows, "x", test.cols, " with ", test.num_classes, "; expected the same"));
  }

  JobSetup setup;
  setup.train_samples = train.num_samples;
  setup.test_samples = test.num_samples;
  ASSIGN_OR_RETURN(const std::vector<model::ParamSpec> params, ImageParams(job, train));
  setup.model_line =
      absl::StrCat(job.model(), ": ", params.size(), " tensors, ", model::TotalElements(params), " parameters");
  ASSIGN_OR_RETURN(setup.shard_map, BuildShardMap(TensorSpecsOf(params), job.num_servers(), job.max_chunk_bytes()));
  setup.total_steps =
      TotalSteps(job, setup.train_samples, data::SyncStepsPerEpoch(setup.train_samples, job.global_batch()));
  return setup;
}

absl::StatusOr<std::vector<model::ParamSpec>> DenseParamSpecs(const JobSpec& job) {
  if (job.model() == kCtrModel) return CtrParams(job);
  if (IsExternalModel(job)) {
    return absl::FailedPreconditionError(
        "the job's model is declared by its workers (model: external): its tensors are not in the job; give them "
        "from a model file of the same model");
  }
  ASSIGN_OR_RETURN(const data::DatasetInfo train,
                   data::ReadDatasetInfo(job.data().data_dir(), data::Split::kTrain, job.data().train_limit()));
  return ImageParams(job, train);
}

}  // namespace scheduler
}  // namespace pstrain
