#include "scheduler/declared_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "data/assignment.h"
#include "scheduler/scheduler.h"
#include "scheduler/shard_map.h"

namespace pstrain {
namespace scheduler {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

std::string ShapeText(const TensorSpec& tensor) {
  return ShapeText(std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end()));
}

}  // namespace

absl::StatusOr<model::ModelFile> ParseDeclaration(const ModelDeclaration& declaration, bool stream) {
  const std::string who = absl::StrCat("worker ", declaration.worker_rank());
  const std::string what = absl::StrCat("model declaration from ", who);
  if (stream) {
    if (declaration.train_samples() != 0 || declaration.test_samples() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", declaration.train_samples(), " training and ", declaration.test_samples(),
          " test samples; the job trains on a data stream, whose records it counts itself, with no test set: "
          "expected 0 and 0"));
    }
  } else if (declaration.train_samples() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", declaration.train_samples(), " training samples, expected at least 1"));
  }
  if (declaration.test_samples() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", declaration.test_samples(), " test samples, expected >= 0"));
  }
  ASSIGN_OR_RETURN(model::ModelFile file,
                   model::ParseModelFile(declaration.model_file(),
                                         absl::StrCat(what, " (", declaration.model_file().size(), " bytes)")));
  if (file.params.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the model has no tensors, expected at least one"));
  }
  for (int i = 0; i < declaration.averaged_tensors_size(); ++i) {
    const std::string& name = declaration.averaged_tensors(i);
    const bool declared =
        std::any_of(file.params.begin(), file.params.end(), [&](const model::ParamSpec& p) { return p.name == name; });
    if (!declared) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": averaged tensor '", name, "' is not a declared tensor"));
    }
    for (int j = 0; j < i; ++j) {
      if (declaration.averaged_tensors(j) == name) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": averaged tensor '", name, "' is listed twice (at ", j, " and ", i, ")"));
      }
    }
  }
  for (size_t i = 0; i < file.params.size(); ++i) {
    const model::ParamSpec& p = file.params[i];
    if (p.shape.empty()) {
      // The shard map and the servers describe every tensor by a non-empty shape.
      return absl::InvalidArgumentError(absl::StrCat(what, ": tensor ", i, " '", p.name,
                                                     "' has no dimensions (a scalar); declare it with shape [1]"));
    }
    if (p.num_elements == 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": tensor ", i, " '", p.name, "' with shape ",
                                                     ShapeText(p.shape), " has no elements, expected at least one"));
    }
  }
  // Non-finite initial values were refused by the parser (model::ParseModelFile names the tensor
  // and element).
  return file;
}

absl::Status CheckPinnedSizes(const JobSpec& job, int worker_rank, int64_t train_samples, int64_t test_samples) {
  const int64_t pinned_train = job.data().train_samples();
  const int64_t pinned_test = job.data().test_samples();
  if (pinned_train > 0 && train_samples != pinned_train) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", worker_rank, " declares ", train_samples,
                                                   " training samples; the job pins ", pinned_train,
                                                   " (data.train_samples)"));
  }
  if (pinned_test > 0 && test_samples != pinned_test) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", worker_rank, " declares ", test_samples,
                                                   " test samples; the job pins ", pinned_test,
                                                   " (data.test_samples)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSetup> SetUpDeclaredJob(const JobSpec& job, const std::vector<model::ParamSpec>& params,
                                          const std::vector<std::string>& averaged, int64_t train_samples,
                                          int64_t test_samples, int worker_rank) {
  JobSetup setup;
  setup.train_samples = train_samples;
  setup.test_samples = test_samples;
  setup.model_line = absl::StrCat(job.model(), ": ", params.size(), " tensors",
                                  averaged.empty() ? "" : absl::StrCat(" (", averaged.size(), " averaged)"), ", ",
                                  model::TotalElements(params), " parameters (declared by worker ", worker_rank, ")");
  ASSIGN_OR_RETURN(setup.shard_map,
                   BuildShardMap(TensorSpecsOf(params, averaged), job.num_servers(), job.max_chunk_bytes()));
  setup.total_steps = TotalSteps(job, train_samples, data::SyncStepsPerEpoch(train_samples, job.global_batch()));
  return setup;
}

absl::Status MatchDeclaration(absl::string_view who, const std::vector<model::ParamSpec>& declared,
                              int64_t train_samples, int64_t test_samples,
                              const google::protobuf::RepeatedPtrField<TensorSpec>& tensors, int64_t job_train_samples,
                              int64_t job_test_samples) {
  if (static_cast<int>(declared.size()) != tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " declares ", declared.size(), " tensors; the job's model has ", tensors.size()));
  }
  for (int i = 0; i < tensors.size(); ++i) {
    const model::ParamSpec& d = declared[i];
    const TensorSpec& t = tensors[i];
    if (d.name != t.name()) {
      return absl::InvalidArgumentError(absl::StrCat(who, " declares tensor ", i, " as '", d.name,
                                                     "'; the job's tensor ", i, " is '", t.name(), "'"));
    }
    if (d.shape != std::vector<int64_t>(t.shape().begin(), t.shape().end())) {
      return absl::InvalidArgumentError(absl::StrCat(who, " declares tensor ", i, " '", d.name, "' with shape ",
                                                     ShapeText(d.shape), "; the job's is ", ShapeText(t)));
    }
  }
  if (train_samples != job_train_samples) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " declares ", train_samples, " training samples; the job has ", job_train_samples));
  }
  if (test_samples != job_test_samples) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " declares ", test_samples, " test samples; the job has ", job_test_samples));
  }
  return absl::OkStatus();
}

absl::Status MatchAveragedTensors(absl::string_view who,
                                  const google::protobuf::RepeatedPtrField<std::string>& averaged,
                                  const google::protobuf::RepeatedPtrField<TensorSpec>& tensors) {
  for (const TensorSpec& t : tensors) {
    const bool declared = std::find(averaged.begin(), averaged.end(), t.name()) != averaged.end();
    if (declared && !t.averaged()) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, " declares tensor '", t.name(), "' as averaged; the job trains it"));
    }
    if (!declared && t.averaged()) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, " declares tensor '", t.name(), "' as trained; the job averages it"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSavedDeclaration(absl::string_view model_file, const SchedulerState& state) {
  const std::string what = "scheduler state: the declared model file beside it";
  ASSIGN_OR_RETURN(const model::ModelFile file, model::ParseModelFile(model_file, what));
  absl::Status match =
      MatchDeclaration(what, file.params, state.train_samples(), state.test_samples(),
                       state.membership().shard_map().tensors(), state.train_samples(), state.test_samples());
  if (!match.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(match.message(), " (the state's shard map)"));
  }
  return absl::OkStatus();
}

}  // namespace scheduler
}  // namespace pstrain
