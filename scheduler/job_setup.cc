#include "scheduler/job_setup.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/assignment.h"
#include "data/idx_reader.h"
#include "model/model.h"
#include "scheduler/scheduler.h"
#include "scheduler/shard_map.h"

namespace pstrain {
namespace scheduler {
namespace {

InitKind ToProto(model::InitKind kind) {
  switch (kind) {
    case model::InitKind::kZeros: return ZEROS;
    case model::InitKind::kHeUniform: return HE_UNIFORM;
    case model::InitKind::kGlorotUniform: return GLOROT_UNIFORM;
  }
  return INIT_UNSPECIFIED;
}

}  // namespace

std::vector<TensorSpec> TensorSpecsOf(const std::vector<model::ParamSpec>& params) {
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    const model::ParamSpec& p = params[i];
    TensorSpec t;
    t.set_id(i);
    t.set_name(p.name);
    for (int64_t d : p.shape) t.add_shape(d);
    t.set_num_elements(p.num_elements);
    t.set_init(ToProto(p.init));
    t.set_fan_in(p.fan_in);
    t.set_fan_out(p.fan_out);
    t.set_flat_offset(p.flat_offset);
    tensors.push_back(std::move(t));
  }
  return tensors;
}

absl::StatusOr<JobSetup> SetUpJob(const JobSpec& job) {
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
