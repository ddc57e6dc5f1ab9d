// Scheduler, part three: declared models (JobSpec.model "external"). The first valid declaration
// of a live worker fixes the job's tensors, shard map, initial values and data set sizes; later
// ones are compared with it. See "Declared models" in scheduler.h and scheduler/declared_model.h.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/declared_model.h"
#include "scheduler/declared_tables.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {

bool Scheduler::ModelKnownLocked() const { return !IsExternalModel(options_.job) || declared_.has_value(); }

absl::Status Scheduler::DeclareModel(const ModelDeclaration& declaration) {
  const int rank = declaration.worker_rank();
  const std::string what = absl::StrCat("model declaration from worker ", rank);
  if (!IsExternalModel(options_.job)) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the job's model is '", options_.job.model(),
                                                      "', built in; only a job with model '", kExternalModel,
                                                      "' takes declared models"));
  }
  auto check = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (state_ == FAILED) return JobFailedError();
    return CheckLive(WORKER, rank, "model declaration");
  };
  // One declaration at a time, so that two first ones cannot both be accepted.
  absl::MutexLock declare_lock(&declare_mu_);
  std::optional<DeclaredModel> accepted;
  ShardMap job_map;
  int64_t job_train = 0, job_test = 0;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(check());
    accepted = declared_;
    if (accepted.has_value()) {
      job_map = membership_.View().shard_map();
      // A stream's records are the scheduler's count, not the declared one (0).
      job_train = stream_.has_value() ? 0 : train_samples_;
      job_test = test_samples_;
    }
  }
  // Parsing reads the whole file (a large model takes a while): outside the lock.
  ASSIGN_OR_RETURN(const model::ModelFile file, ParseDeclaration(declaration, IsStreamJob(options_.job)));
  RETURN_IF_ERROR(CheckDeclaredTables(options_.job, declaration));
  const std::string who = absl::StrCat("worker ", rank);
  const bool job_has_tables = options_.job.tables_size() > 0;
  if (accepted.has_value()) {
    RETURN_IF_ERROR(MatchDeclaration(who, file.params, declaration.train_samples(), declaration.test_samples(),
                                     job_map.tensors(), job_train, job_test));
    RETURN_IF_ERROR(MatchAveragedTensors(who, declaration.averaged_tensors(), job_map.tensors()));
    RETURN_IF_ERROR(
        MatchDeclaredTables(who, declaration.tables(), job_has_tables ? options_.job.tables() : accepted->tables));
    LOG(INFO) << who << " declares the job's model (accepted from worker " << accepted->worker_rank << ")";
    // In case saving the state failed after the first acceptance (the caller's retry lands here).
    Deferred deferred;
    {
      absl::MutexLock lock(&mu_);
      SaveLocked(&deferred);
    }
    return Run(std::move(deferred));
  }
  RETURN_IF_ERROR(CheckPinnedSizes(options_.job, rank, declaration.train_samples(), declaration.test_samples()));
  if (job_has_tables) RETURN_IF_ERROR(MatchDeclaredTables(who, declaration.tables(), options_.job.tables()));
  // The tables this declaration gives a job without its own, which the job's memory budget must hold.
  TableList adopted = job_has_tables ? TableList() : AdoptDeclaredTables(options_.job, declaration.tables());
  if (!adopted.empty()) {
    JobSpec with_tables = options_.job;
    *with_tables.mutable_tables() = adopted;
    if (absl::Status budget = ValidateMemoryBudget(with_tables); !budget.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("model declaration from ", who, ": ", budget.message()));
    }
  }
  const std::vector<std::string> averaged(declaration.averaged_tensors().begin(), declaration.averaged_tensors().end());
  ASSIGN_OR_RETURN(JobSetup setup, SetUpDeclaredJob(options_.job, file.params, averaged, declaration.train_samples(),
                                                    declaration.test_samples(), rank));
  if (options_.save_declared_model) {
    // Durable before the state names it, so a restarted scheduler always finds the file.
    if (absl::Status saved = options_.save_declared_model(declaration.model_file()); !saved.ok()) {
      LOG(ERROR) << what << ": cannot save the model file: " << saved;
      return absl::UnavailableError(absl::StrCat(what, ": the model file was not saved: ", saved.message()));
    }
  }
  if (options_.record_declaration) {
    if (absl::Status recorded = options_.record_declaration(declaration.model_file(), adopted); !recorded.ok()) {
      LOG(ERROR) << what << ": cannot record the declaration beside the checkpoints: " << recorded;
      return absl::UnavailableError(
          absl::StrCat(what, ": the declaration was not recorded beside the checkpoints: ", recorded.message()));
    }
  }
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(check());  // The job may have failed, or the worker died, meanwhile.
    declared_ = DeclaredModel{rank, std::make_shared<const std::string>(declaration.model_file()), std::move(adopted)};
    train_samples_ = setup.train_samples;
    test_samples_ = setup.test_samples;
    total_steps_ = setup.total_steps;
    if (stream_.has_value()) {
      // The ready records so far; RefreshStream grows them.
      train_samples_ = stream_->records();
      total_steps_ = stream_->trainable_steps();
    }
    LOG(INFO) << "model " << setup.model_line << " in " << setup.shard_map.chunks_size() << " chunks over "
              << options_.job.num_servers() << " servers; data: " << train_samples_ << " training and " << test_samples_
              << " test samples" << (stream_.has_value() ? " (the data stream's ready ones)" : "") << "; "
              << total_steps_ << " steps"
              << (declared_->tables.empty()
                      ? ""
                      : absl::StrCat("; ", declared_->tables.size(), " embedding tables declared"));
    membership_.SetModel(std::move(setup.shard_map), train_samples_, test_samples_, total_steps_);
    // Nothing was leased or reported yet: the job has not run (it needs this declaration).
    leases_ = std::make_unique<LeasePool>(LeaseOptions(options_, train_samples_));
    if (stream_.has_value()) leases_->SetStream(train_samples_, stream_->ended());
    progress_ =
        std::make_unique<Progress>(ProgressOptions(options_, created_, train_samples_, test_samples_, total_steps_));
    if (state_ == WAITING_FOR_ROLES && membership_.running()) StartRunningLocked(&deferred);
    SaveLocked(&deferred);
  }
  return Run(std::move(deferred));
}

absl::StatusOr<Scheduler::DeclaredModel> Scheduler::InitialModel() const {
  if (!IsExternalModel(options_.job)) {
    return absl::FailedPreconditionError(absl::StrCat("initial model: the job's model is '", options_.job.model(),
                                                      "', built in; servers initialise it themselves"));
  }
  absl::MutexLock lock(&mu_);
  if (!declared_.has_value()) {
    return absl::FailedPreconditionError("initial model: no model declared yet");
  }
  return *declared_;
}

}  // namespace scheduler
}  // namespace pstrain
