#include "serving/job_checkpoints.h"

#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "model/model_file.h"
#include "scheduler/job_setup.h"

namespace pstrain::serving {

absl::StatusOr<CheckpointExportOptions> ReadJobCheckpoints(const std::string& checkpoint_dir,
                                                           const std::string& model_file) {
  CheckpointExportOptions options;
  options.checkpoint_dir = checkpoint_dir;
  const std::string job_path = checkpoint_dir + "/" + kJobManifestName;
  ASSIGN_OR_RETURN(options.job, ReadJobSpecFile(job_path, "the job of the checkpoints"));
  std::string layout = model_file;
  if (IsExternalModel(options.job)) {
    // The workers declared the model: the scheduler recorded the declaration beside the
    // checkpoints once it accepted it (NOT_FOUND until then, as for the job's own file).
    // A folder of a scheduler from before the record, with --model_file: the job's tables (none).
    const std::string tables_path = checkpoint_dir + "/" + kDeclaredTablesName;
    absl::StatusOr<JobSpec> declared = ReadJobSpecFile(tables_path, "the declared tables");
    if (!declared.ok() && !(absl::IsNotFound(declared.status()) && !model_file.empty())) return declared.status();
    if (declared.ok() && options.job.tables_size() == 0) *options.job.mutable_tables() = declared->tables();
    if (layout.empty()) layout = checkpoint_dir + "/" + kDeclaredModelName;
  }
  if (!layout.empty()) {
    absl::StatusOr<model::ModelFile> model = model::ReadModelFile(layout);
    if (!model.ok()) {
      return absl::Status(
          model.status().code(),
          absl::StrCat(model_file.empty() ? "the declared model: " : "--model_file: ", model.status().message()));
    }
    options.params = std::move(model->params);
    return options;
  }
  absl::StatusOr<std::vector<model::ParamSpec>> params = scheduler::DenseParamSpecs(options.job);
  if (!params.ok()) {
    return absl::Status(params.status().code(),
                        absl::StrCat("the job's model (", job_path, "): ", params.status().message()));
  }
  options.params = std::move(params).value();
  return options;
}

}  // namespace pstrain::serving
