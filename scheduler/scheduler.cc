#include "scheduler/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/barriers.h"
#include "common/job_spec.h"
#include "glog/logging.h"

namespace pstrain {
namespace scheduler {
namespace {

Membership::Options MembershipOptions(const Scheduler::Options& o) {
  Membership::Options m;
  m.num_servers = o.job.num_servers();
  m.num_workers = o.job.num_workers();
  m.dead_after = o.dead_after;
  m.shard_map = o.shard_map;
  m.train_samples = o.train_samples;
  m.test_samples = o.test_samples;
  m.total_steps = o.total_steps;
  return m;
}

LeasePool::Options LeaseOptions(const Scheduler::Options& o) {
  LeasePool::Options l;
  l.train_samples = o.train_samples;
  l.batch_size = o.job.batch_size();
  l.lease_batches = o.job.lease_batches();
  l.epochs = o.job.epochs();
  l.max_batches = o.job.max_steps();
  return l;
}

}  // namespace

int64_t TotalSteps(const JobSpec& job, int64_t train_samples, int64_t sync_steps_per_epoch) {
  int64_t per_epoch = sync_steps_per_epoch;
  if (job.mode() != SYNC) per_epoch = (train_samples + job.batch_size() - 1) / job.batch_size();
  int64_t total = job.epochs() * per_epoch;
  if (job.max_steps() > 0) total = std::min(total, job.max_steps());
  return total;
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(Options options) {
  if (absl::Status s = ValidateJobSpec(options.job); !s.ok()) return s;
  if (options.train_samples < 0 || options.test_samples < 0 || options.total_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler: negative counts (train_samples ", options.train_samples, ", test_samples ",
        options.test_samples, ", total_steps ", options.total_steps, ")"));
  }
  for (const ChunkSpec& chunk : options.shard_map.chunks()) {
    if (chunk.server_rank() < 0 || chunk.server_rank() >= options.job.num_servers()) {
      return absl::InvalidArgumentError(absl::StrCat("scheduler: shard map names server ",
                                                     chunk.server_rank(), ", expected < ",
                                                     options.job.num_servers()));
    }
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(options)));
}

Scheduler::Scheduler(Options options)
    : options_(std::move(options)),
      created_(options_.clock()),
      membership_(MembershipOptions(options_)),
      leases_(LeaseOptions(options_)),
      progress_(Progress::Options{options_.job, options_.total_steps, created_}) {}

absl::Status Scheduler::JobFailedError() const {
  return absl::AbortedError(absl::StrCat("job failed: ", failure_.message()));
}

ClusterView Scheduler::ViewLocked() const {
  ClusterView view = membership_.View();
  if (Ended()) {
    view.set_state(state_);
    if (state_ == FAILED) view.set_failure(std::string(failure_.message()));
  }
  return view;
}

ClusterView Scheduler::View() const {
  absl::MutexLock lock(&mu_);
  return ViewLocked();
}

absl::StatusOr<RegisterResponse> Scheduler::Register(const RegisterRequest& request) {
  std::vector<ViewDone> released;
  ClusterView view;
  RegisterResponse response;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == FAILED) return JobFailedError();
    const int before = membership_.num_registered(request.role());
    // Once FINISHED every slot is taken, so only a re-registration succeeds.
    absl::StatusOr<int> rank = membership_.Register(request.role(), request.address(), request.instance_id(), Now());
    if (!rank.ok()) return rank.status();
    if (membership_.num_registered(request.role()) > before) {
      LOG(INFO) << "registered " << membership_.Describe(request.role(), *rank) << " ("
                << membership_.num_registered(SERVER) << "/" << options_.job.num_servers()
                << " servers, " << membership_.num_registered(WORKER) << "/"
                << options_.job.num_workers() << " workers, membership epoch "
                << membership_.epoch() << ")";
      if (state_ == WAITING_FOR_ROLES && membership_.complete()) {
        state_ = RUNNING;
        LOG(INFO) << "every role registered; job RUNNING";
        released.swap(view_waiters_);
        view = ViewLocked();
      }
    }
    response.set_rank(*rank);
    *response.mutable_job() = options_.job;
    response.set_heartbeat_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
    response.set_dead_after_ms(absl::ToInt64Milliseconds(options_.dead_after));
  }
  for (ViewDone& done : released) done(view);
  return response;
}

void Scheduler::WhenRunning(ViewDone done) {
  absl::StatusOr<ClusterView> answer;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == WAITING_FOR_ROLES) {
      view_waiters_.push_back(std::move(done));
      return;
    }
    if (state_ == FAILED) {
      answer = JobFailedError();
    } else {
      answer = ViewLocked();
    }
  }
  done(std::move(answer));
}

absl::StatusOr<HeartbeatResponse> Scheduler::Heartbeat(const HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = membership_.Heartbeat(request.role(), request.rank(), Now()); !s.ok()) {
    return s;
  }
  HeartbeatResponse response;
  response.set_state(state_);
  response.set_membership_epoch(membership_.epoch());
  if (state_ == FAILED) response.set_failure(std::string(failure_.message()));
  return response;
}

absl::Status Scheduler::CheckRegistered(Role role, int rank, absl::string_view what) const {
  if ((role != SERVER && role != WORKER) || rank < 0 || rank >= membership_.num_registered(role)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " from ", RoleName(role), " ", rank,
                                                      ": not registered"));
  }
  return absl::OkStatus();
}

void Scheduler::Barrier(const BarrierRequest& request, BarrierSet::Done done) {
  const Role role = request.role() == ROLE_UNSPECIFIED ? WORKER : request.role();
  int count = options_.job.num_workers();
  if (request.participants() == BarrierRequest::ALL) count += options_.job.num_servers();
  absl::Status registered;
  {
    absl::MutexLock lock(&mu_);
    registered = CheckRegistered(role, request.rank(), absl::StrCat("barrier '", request.name(), "'"));
  }
  if (!registered.ok()) {
    done(registered);
    return;
  }
  VLOG(1) << "barrier '" << request.name() << "': " << RoleName(role) << " " << request.rank()
          << " entered (" << count << " participants)";
  if (request.name() == kServersReadyBarrier) {
    // Training starts when this barrier opens; throughput and ETA are measured from then, not
    // from registration (workers load their data in between).
    done = [this, done = std::move(done)](absl::Status status) {
      if (status.ok()) {
        absl::MutexLock lock(&mu_);
        progress_.Start(Now());
      }
      done(std::move(status));
    };
  }
  // Entered without mu_: if the job ends meanwhile, FailAll answers this entry too.
  barriers_.Enter(request.name(), count, absl::StrCat(RoleName(role), " ", request.rank()),
                  std::move(done));
}

absl::StatusOr<LeaseResponse> Scheduler::LeaseWork(const LeaseRequest& request) {
  absl::MutexLock lock(&mu_);
  if (state_ == FAILED) return JobFailedError();
  if (options_.job.mode() == SYNC) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease for worker ", request.worker_rank(), ": the job is in sync mode; leases are for async and ssp"));
  }
  if (state_ == WAITING_FOR_ROLES) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease for worker ", request.worker_rank(), ": not every role has registered yet"));
  }
  if (absl::Status s = CheckRegistered(WORKER, request.worker_rank(), "lease request"); !s.ok()) {
    return s;
  }
  absl::StatusOr<Lease> lease = leases_.Next(request.worker_rank(), request.epoch());
  if (!lease.ok()) return lease.status();
  LeaseResponse response;
  response.set_epoch_done(lease->epoch_done);
  response.set_lease_id(lease->id);
  response.set_begin(lease->begin);
  response.set_end(lease->end);
  VLOG(1) << "lease " << lease->id << " for worker " << request.worker_rank() << " epoch "
          << request.epoch() << ": [" << lease->begin << ", " << lease->end << ")"
          << (lease->epoch_done ? " epoch done" : "");
  return response;
}

absl::Status Scheduler::ReportProgress(const ProgressReport& report) {
  std::vector<ViewDone> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == FAILED) return JobFailedError();
    if (absl::Status s = progress_.Add(report, Now()); !s.ok()) return s;
    if (report.has_eval()) {
      VLOG(1) << "worker " << report.worker_rank() << " evaluated epoch " << report.epoch();
    }
    if (state_ != FINISHED && progress_.finished()) {
      LOG(INFO) << "every worker is done; job FINISHED";
      waiters = EndLocked(FINISHED, absl::OkStatus());
    } else {
      return absl::OkStatus();
    }
  }
  AnswerEnd(std::move(waiters));
  return absl::OkStatus();
}

void Scheduler::ReportFailure(const FailureReport& report) {
  std::string who;
  {
    absl::MutexLock lock(&mu_);
    who = membership_.Describe(report.role(), report.rank());
  }
  Fail(absl::AbortedError(absl::StrCat(who, ": ", report.message())));
}

void Scheduler::Fail(absl::Status reason) {
  if (reason.ok()) reason = absl::UnknownError("job failed without a reason");
  std::vector<ViewDone> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) {
      LOG(WARNING) << "after the job ended: " << reason;
      return;
    }
    LOG(ERROR) << "job FAILED: " << reason.message();
    waiters = EndLocked(FAILED, std::move(reason));
  }
  AnswerEnd(std::move(waiters));
}

std::vector<Scheduler::ViewDone> Scheduler::EndLocked(JobState state, absl::Status failure) {
  state_ = state;
  failure_ = std::move(failure);
  ended_at_ = Now();
  std::vector<ViewDone> waiters;
  waiters.swap(view_waiters_);
  return waiters;
}

void Scheduler::AnswerEnd(std::vector<ViewDone> waiters) {
  absl::Status barrier_answer;
  absl::StatusOr<ClusterView> view_answer;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == FAILED) {
      barrier_answer = JobFailedError();
      view_answer = barrier_answer;
    } else {
      barrier_answer = absl::AbortedError("job finished");
      view_answer = ViewLocked();
    }
  }
  for (ViewDone& done : waiters) done(view_answer);
  barriers_.FailAll(barrier_answer);
}

void Scheduler::CheckHealth() {
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;
    const absl::Time now = Now();
    std::vector<std::string> dead = membership_.FindDead(now);
    std::vector<std::string> never_started = membership_.FindNeverStarted(now, options_.startup_timeout);
    if (!dead.empty()) {
      failure = absl::UnavailableError(absl::StrJoin(dead, "; "));
    } else if (!never_started.empty()) {
      failure = absl::DeadlineExceededError(absl::StrJoin(never_started, "; "));
    } else if (state_ == WAITING_FOR_ROLES && now - created_ > options_.startup_timeout) {
      failure = absl::DeadlineExceededError(absl::StrFormat(
          "only %d of %d servers and %d of %d workers registered within %s",
          membership_.num_registered(SERVER), options_.job.num_servers(),
          membership_.num_registered(WORKER), options_.job.num_workers(),
          absl::FormatDuration(options_.startup_timeout)));
    }
  }
  if (!failure.ok()) Fail(failure);
}

JobStatus Scheduler::Status() const {
  absl::MutexLock lock(&mu_);
  JobStatus status = progress_.Status(Now());
  status.set_state(state_);
  if (state_ == FAILED) status.set_failure(std::string(failure_.message()));
  status.set_registered_servers(membership_.num_registered(SERVER));
  status.set_registered_workers(membership_.num_registered(WORKER));
  return status;
}

JobState Scheduler::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

absl::Status Scheduler::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

bool Scheduler::AwaitEnd(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return Ended(); };
  return mu_.AwaitWithTimeout(absl::Condition(&ended), timeout);
}

bool Scheduler::ServersKnowTheEnd() const {
  absl::MutexLock lock(&mu_);
  return Ended() && membership_.AllServersHeardSince(ended_at_);
}

std::string Scheduler::SummaryJson() const {
  absl::MutexLock lock(&mu_);
  return progress_.SummaryJson(state_, failure_.message(), Now());
}

std::string Scheduler::OutcomeLine() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = Now();
  std::string line = absl::StrCat("job ", JobState_Name(state_));
  if (state_ == FAILED) absl::StrAppend(&line, " (", failure_.message(), ")");
  const std::optional<double> accuracy = progress_.final_test_accuracy();
  const std::optional<double> loss = progress_.final_test_loss();
  if (accuracy.has_value()) absl::StrAppendFormat(&line, ": test accuracy %.4f", *accuracy);
  else absl::StrAppend(&line, ": no test accuracy");
  if (loss.has_value()) absl::StrAppendFormat(&line, ", test loss %.4f", *loss);
  absl::StrAppendFormat(&line, ", %.0f samples/s", progress_.samples_per_second(now));
  return line;
}

}  // namespace scheduler
}  // namespace pstrain
