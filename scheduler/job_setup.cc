#include "scheduler/job_setup.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "data/assignment.h"
#include "data/idx_reader.h"
#include "model/model.h"
#include "scheduler/scheduler.h"
#include "scheduler/shard_map.h"

namespace pstrain {
namespace scheduler {
absl::StatusOr<JobSetup> SetUpJob(const JobSpec& job) {
  if (IsExternalModel(job)) {
    // The workers declare the model and the sizes (declared_model.h); the data is theirs.
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
    return absl::InvalidArgumentError(
        absl::StrCat("training set in ", dir, ": no samples, expected at least one"));
  }
  if (train.rows != test.rows || train.cols != test.cols || train.num_classes != test.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data in ", dir, ": training images are ", train.rows, "x", train.cols, " with ",
        train.num_classes, " classes but test images are ", test.rows, "x", test.cols, " with ",
        test.num_classes, "; expected the same"));
  }

  JobSetup setup;
  setup.train_samples = train.num_samples;
  setup.test_samples = test.num_samples;
  const model::ModelInput input = model::ImageModelInput(
      train.rows, train.cols, train.num_classes, {job.hidden_sizes().begin(), job.hidden_sizes().end()});
  ASSIGN_OR_RETURN(const std::vector<model::ParamSpec> params, model::ModelParamSpecs(job.model(), input));
  setup.model_line = absl::StrCat(job.model(), ": ", params.size(), " tensors, ", model::TotalElements(params),
                                  " parameters");
  ASSIGN_OR_RETURN(setup.shard_map, BuildShardMap(TensorSpecsOf(params), job.num_servers(), job.max_chunk_bytes()));
  setup.total_steps = TotalSteps(
      job, setup.train_samples,
      data::SyncStepsPerEpoch(setup.train_samples, job.global_batch()));
  return setup;
}

}  // namespace scheduler
}  // namespace pstrain
