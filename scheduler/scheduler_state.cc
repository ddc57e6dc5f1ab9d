// The Scheduler's persistence: snapshots of its state (SchedulerState), saving them before answers
// go out, and a restarted scheduler's restore. See "Restart" in scheduler/scheduler.h.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/message_differencer.h"
#include "scheduler/declared_model.h"
#include "scheduler/member_limits.h"
#include "scheduler/scheduler.h"

namespace pstrain {
namespace scheduler {
namespace {

// How `state.job` differs from `job`, or "" when it is the same job. A restart with --resume is
// the same job as the run it continues.
std::string JobDifference(const JobSpec& job, const JobSpec& saved) {
  google::protobuf::util::MessageDifferencer differ;
  std::string report;
  differ.ReportDifferencesToString(&report);
  if (const google::protobuf::FieldDescriptor* resume = JobSpec::descriptor()->FindFieldByName("resume")) {
    differ.IgnoreField(resume);
  }
  if (differ.Compare(saved, job)) return "";
  while (!report.empty() && report.back() == '\n') report.pop_back();
  return report;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Restore(Options options, const SchedulerState& state) {
  if (std::string diff = JobDifference(options.job, state.job()); !diff.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("scheduler state: it is of another job (saved -> this command line: ", diff,
                     "); expected the same job flags as the scheduler that wrote it, or an empty --state_dir"));
  }
  if (IsStreamJob(options.job)) {
    // The stream's catalog as the job took it: the folder may have gained files since (the next
    // RefreshStream takes them in) or lost trained ones (a writer's retention).
    options.train_samples = state.train_samples();
    options.test_samples = state.test_samples();
    options.total_steps = state.total_steps();
    RETURN_IF_ERROR(StreamScores::CheckSaved(state.stream()));
    options.stream = state.stream();
  } else if (IsExternalModel(options.job) && state.has_declared_model()) {
    // The sizes are the declaration's (pinned ones were compared with the job above).
    options.train_samples = state.train_samples();
    options.test_samples = state.test_samples();
    options.total_steps = state.total_steps();
  } else if (state.train_samples() != options.train_samples || state.test_samples() != options.test_samples ||
             state.total_steps() != options.total_steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "scheduler state: written for ", state.train_samples(), " training samples, ", state.test_samples(),
        " test samples and ", state.total_steps(), " steps; the data set now gives ", options.train_samples, ", ",
        options.test_samples, " and ", options.total_steps, ": the data changed under the job"));
  }
  // The view's shard map as the job left it, not as the job would build it today.
  if (state.membership().has_shard_map()) options.shard_map = state.membership().shard_map();
  options.created = absl::FromUnixMicros(state.created_us());
  std::string declared_model_file = std::move(options.declared_model_file);
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Create(std::move(options));
  if (!scheduler.ok()) return scheduler.status();
  if (absl::Status s = (*scheduler)->RestoreFrom(state, std::move(declared_model_file)); !s.ok()) return s;
  return scheduler;
}

absl::Status Scheduler::RestoreFrom(const SchedulerState& state, std::string declared_model_file) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = Now();
  switch (state.state()) {
    case WAITING_FOR_ROLES:
    case RUNNING:
    case FINISHED:
    case FAILED:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("scheduler state: job state ", static_cast<int>(state.state()),
                                                     ", expected WAITING_FOR_ROLES, RUNNING, FINISHED or FAILED"));
  }
  RETURN_IF_ERROR(fleet_.Restore(state));
  if (state.has_declared_model()) {
    if (!IsExternalModel(options_.job)) {
      return absl::InvalidArgumentError(absl::StrCat("scheduler state: a declared model for a job with model '",
                                                     options_.job.model(), "'; expected none"));
    }
    const DeclaredModelState& saved = state.declared_model();
    if (static_cast<int64_t>(declared_model_file.size()) != saved.model_file_bytes()) {
      return absl::DataLossError(absl::StrCat("scheduler state: the declared model file holds ",
                                              declared_model_file.size(), " bytes, the state says ",
                                              saved.model_file_bytes(), ": it was changed or lost"));
    }
    RETURN_IF_ERROR(CheckSavedDeclaration(declared_model_file, state));
    if (saved.tables_size() > 0 && options_.job.tables_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat("scheduler state: the declared model adopted ",
                                                     saved.tables_size(), " tables for a job that declares its own"));
    }
    declared_ = DeclaredModel{saved.worker_rank(), std::make_shared<const std::string>(std::move(declared_model_file)),
                              saved.tables()};
  }
  if (!state.session_key().empty()) {
    // The predecessor's key, so the credentials the roles hold stay good. A state without one
    // (written before session credentials) keeps the fresh key Create made.
    absl::StatusOr<std::unique_ptr<SessionSigner>> signer = SessionSigner::FromPrivateKey(state.session_key());
    if (!signer.ok()) return absl::InvalidArgumentError(absl::StrCat("scheduler state: ", signer.status().message()));
    UseSessionKey(*std::move(signer));
  }
  RETURN_IF_ERROR(scaling_.Restore(state.scaling()));
  if (const std::optional<ServerScaling::Pending>& pending = scaling_.pending();
      pending.has_value() && pending->to > ServersLocked()) {
    membership_.SetServerSlots(pending->to);  // as Scale did: the added ranks register
  }
  if (absl::Status s = membership_.Restore(state.membership(), now); !s.ok()) return s;
  if (absl::Status s = leases_->Restore(state.leases()); !s.ok()) return s;
  if (absl::Status s = progress_->Restore(state.progress()); !s.ok()) return s;
  barriers_.RestoreReleased({state.released_barriers().begin(), state.released_barriers().end()});
  state_ = state.state();
  failure_ = absl::OkStatus();
  if (state_ == FAILED) {
    const auto code = static_cast<absl::StatusCode>(state.failure_code());
    failure_ = absl::Status(code == absl::StatusCode::kOk ? absl::StatusCode::kUnknown : code, state.failure());
  }
  ended_at_ = absl::FromUnixMicros(state.ended_at_us());
  final_model_.set_written(state.final_model_written());
  worker_failures_.clear();
  for (const std::string& message : state.worker_failures()) {
    worker_failures_.push_back(BoundedReason(message));
    if (worker_failures_.size() > kMaxFailureMessages) worker_failures_.pop_front();
  }
  if (state_ == RUNNING) {
    // Dead servers' confirmations do not count (LeasePool::SetServerCounts). The predecessor saved
    // after each completion, so what completes here was counted already (counting is idempotent).
    for (int rank = 0; rank < ServersLocked(); ++rank) {
      if (membership_.is_live(SERVER, rank)) continue;
      for (const LeaseRecord& lease : leases_->SetServerCounts(rank, false)) {
        progress_->CountLease(lease.id, lease.epoch, lease.samples());
      }
    }
  }
  retries_.Restore(state);
  port_ = state.port();
  restarts_ = state.restarts() + 1;

  Deferred unused;  // Nothing is parked in a fresh scheduler: no answers come out of these.
  if (Ended()) {
    // The servers learn the end from a heartbeat to this scheduler (ServersKnowTheEnd).
    ended_at_ = now + absl::Nanoseconds(1);
    barriers_.FailAll(state_ == FAILED ? JobFailedError() : absl::AbortedError("job finished"),
                      &unused.barrier_answers);
  } else {
    PublishParticipantsLocked(&unused);
  }
  restored_at_ = now;  // Hold-ups count from here (EvictHoldUpsLocked): roles reconnect meanwhile.
  const JobStatus status = progress_->Status(now);
  LOG(INFO) << "restored the scheduler state (restart " << restarts_ << "): job " << JobState_Name(state_) << ", "
            << MembershipLine() << ", step " << status.step() << ", epoch " << status.epoch() << ", "
            << leases_->num_leases() << " training leases cut, " << state.released_barriers_size()
            << " barriers released; every live role has " << absl::FormatDuration(options_.dead_after)
            << " from now to heartbeat again";
  return absl::OkStatus();
}

SchedulerState Scheduler::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return SnapshotLocked();
}

SchedulerState Scheduler::SnapshotLocked() const {
  SchedulerState state;
  *state.mutable_job() = options_.job;
  state.set_train_samples(train_samples_);
  state.set_test_samples(test_samples_);
  state.set_total_steps(total_steps_);
  if (stream_.has_value()) {
    *state.mutable_stream() = stream_->Save();
    stream_scores_->Save(state.mutable_stream());
  }
  state.set_port(port_);
  state.set_created_us(absl::ToUnixMicros(created_));
  state.set_restarts(restarts_);
  state.set_session_key(signer_->private_key());
  state.set_state(state_);
  if (!failure_.ok()) {
    state.set_failure_code(static_cast<int>(failure_.code()));
    state.set_failure(std::string(failure_.message()));
  }
  state.set_ended_at_us(absl::ToUnixMicros(ended_at_));
  *state.mutable_membership() = membership_.ToProto();
  for (BarrierState& barrier : barriers_.Released()) *state.add_released_barriers() = std::move(barrier);
  *state.mutable_leases() = leases_->ToProto();
  *state.mutable_progress() = progress_->ToProto();
  retries_.Save(&state);
  fleet_.Save(&state);
  scaling_.Save(state.mutable_scaling());
  state.set_final_model_written(final_model_.written());
  for (const std::string& message : worker_failures_) state.add_worker_failures(message);
  if (declared_.has_value()) {
    state.mutable_declared_model()->set_worker_rank(declared_->worker_rank);
    state.mutable_declared_model()->set_model_file_bytes(static_cast<int64_t>(declared_->model_file->size()));
    *state.mutable_declared_model()->mutable_tables() = declared_->tables;
  }
  return state;
}

void Scheduler::SaveLocked(Deferred* deferred) {
  if (!options_.persist) return;
  deferred->snapshot = SnapshotLocked();
  deferred->version = ++snapshot_version_;
}

void Scheduler::SaveNowLocked() {
  if (!options_.persist) return;
  const int64_t version = ++snapshot_version_;
  if (absl::Status saved = options_.persist(version, SnapshotLocked()); !saved.ok()) {
    LOG(ERROR) << "cannot save the scheduler state: " << saved;
  }
}

absl::Status Scheduler::Run(Deferred deferred) {
  absl::Status saved;
  if (deferred.snapshot.has_value()) {
    saved = options_.persist(deferred.version, *deferred.snapshot);
    if (!saved.ok()) {
      LOG(ERROR) << "cannot save the scheduler state: " << saved;
      // The change stays in memory; the callers retry, and their retry saves it again.
      saved = absl::UnavailableError(absl::StrCat("scheduler state not saved: ", saved.message()));
      for (BarrierSet::Answer& answer : deferred.barrier_answers) {
        if (answer.status.ok()) answer.status = saved;
      }
      if (deferred.view_answer.ok()) deferred.view_answer = saved;
    }
  }
  for (ViewDone& done : deferred.view_waiters) done(deferred.view_answer);
  RunAnswers(std::move(deferred.barrier_answers));
  return saved;
}

absl::Status Scheduler::RecordPort(int port) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    port_ = port;
    SaveLocked(&deferred);
  }
  return Run(std::move(deferred));
}

}  // namespace scheduler
}  // namespace pstrain
