#include "scheduler/scheduler.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/barriers.h"
#include "common/job_spec.h"
#include "common/server_counts.h"
#include "common/utf8.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/barrier_names.h"
#include "scheduler/json.h"
#include "scheduler/member_limits.h"

namespace pstrain {
namespace scheduler {
namespace {

Membership::Options MembershipOptions(const Scheduler::Options& o) {
  Membership::Options m;
  m.num_servers = ServersOfMap(o.shard_map, o.job.num_servers());
  m.num_workers = o.job.num_workers();
  m.max_workers = o.job.max_workers();
  m.max_joins_per_minute = MaxWorkerJoinsPerMinute(o.job);
  m.global_batch = o.job.global_batch();
  m.dead_after = o.dead_after;
  m.shard_map = o.shard_map;
  m.train_samples = o.train_samples;
  m.test_samples = o.test_samples;
  m.total_steps = o.total_steps;
  return m;
}

}  // namespace

LeasePool::Options Scheduler::LeaseOptions(const Options& o, int64_t train_samples) {
  LeasePool::Options l;
  l.train_samples = train_samples;
  l.batch_size = o.job.batch_size();
  l.lease_batches = o.job.lease_batches();
  l.epochs = o.job.epochs();
  l.max_batches = o.job.max_steps();
  // A restored job that changed its server count confirms with its map's count.
  l.num_servers = std::max(1, ServersOfMap(o.shard_map, o.job.num_servers()));
  l.stream = IsStreamJob(o.job);
  return l;
}

Progress::Options Scheduler::ProgressOptions(const Options& o, absl::Time created, int64_t train_samples,
                                             int64_t test_samples, int64_t total_steps) {
  return Progress::Options{o.job, total_steps, created, test_samples, train_samples, o.job.global_batch()};
}

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
    return absl::InvalidArgumentError(absl::StrCat("scheduler: negative counts (train_samples ", options.train_samples,
                                                   ", test_samples ", options.test_samples, ", total_steps ",
                                                   options.total_steps, ")"));
  }
  // A restored job that changed its server count goes on with its map's count.
  const int map_servers = ServersOfMap(options.shard_map, options.job.num_servers());
  for (const ChunkSpec& chunk : options.shard_map.chunks()) {
    if (chunk.server_rank() < 0 || chunk.server_rank() >= map_servers) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler: shard map names server ", chunk.server_rank(), ", expected < ", map_servers));
    }
  }
  if (options.server_recovery_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler: server recovery timeout is ",
                                                   absl::FormatDuration(options.server_recovery_timeout),
                                                   ", expected > 0"));
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  absl::StatusOr<std::unique_ptr<SessionSigner>> signer = SessionSigner::Generate();
  if (!signer.ok()) return signer.status();
  std::unique_ptr<Scheduler> scheduler(new Scheduler(std::move(options)));
  {
    absl::MutexLock lock(&scheduler->mu_);
    scheduler->UseSessionKey(*std::move(signer));
  }
  return scheduler;
}

Scheduler::Scheduler(Options options)
    : options_(std::move(options)),
      created_(options_.created.value_or(options_.clock())),
      membership_(MembershipOptions(options_)),
      train_samples_(options_.train_samples),
      test_samples_(options_.test_samples),
      total_steps_(options_.total_steps),
      leases_(std::make_unique<LeasePool>(LeaseOptions(options_, options_.train_samples))),
      progress_(std::make_unique<Progress>(
          ProgressOptions(options_, created_, options_.train_samples, options_.test_samples, options_.total_steps))),
      fleet_(ServersOfMap(options_.shard_map, options_.job.num_servers()), options_.job.replicas() == 2),
      final_model_(ServersOfMap(options_.shard_map, options_.job.num_servers())),
      server_reports_(created_) {
  if (options_.resume_step.has_value()) {
    fleet_.SetResumeCut(*options_.resume_step,
                        options_.resume_servers > 0 ? options_.resume_servers : options_.job.num_servers());
  }
  if (IsStreamJob(options_.job)) {
    stream_.emplace(options_.job.data().stream_dir(), options_.job.global_batch(), options_.stream);
    stream_scores_.emplace(options_.progressive_window_files, options_.stream);
    leases_->SetStream(options_.train_samples, stream_->ended());
  }
}

absl::Status Scheduler::JobFailedError() const {
  return absl::AbortedError(absl::StrCat("job failed: ", failure_.message()));
}

ClusterView Scheduler::ViewLocked() const {
  ClusterView view = membership_.View();
  view.set_session_public_key(signer_->public_key());
  // Every role may have registered while an external model is not declared yet.
  if (state_ == WAITING_FOR_ROLES) view.set_state(WAITING_FOR_ROLES);
  fleet_.AddToView(&view);
  if (options_.job.tables_size() > 0) {
    *view.mutable_tables() = options_.job.tables();
  } else if (declared_.has_value()) {
    *view.mutable_tables() = declared_->tables;
  }
  if (stream_.has_value()) *view.mutable_stream() = stream_->View();
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

std::string Scheduler::MembershipLine() const {
  std::string line = absl::StrCat("membership epoch ", membership_.epoch(), ", live workers [",
                                  absl::StrJoin(membership_.LiveRanks(WORKER), ", "), "]");
  if (!fleet_.vacancies().empty() || membership_.num_live(SERVER) != ServersLocked()) {
    absl::StrAppend(&line, ", live servers [", absl::StrJoin(membership_.LiveRanks(SERVER), ", "), "]");
  }
  return line;
}

absl::StatusOr<RegisterResponse> Scheduler::Register(const RegisterRequest& request) {
  RETURN_IF_ERROR(CheckRegisterRequest(request));
  if (options_.build_fingerprint != 0 && request.build_fingerprint() != 0 &&
      request.build_fingerprint() != options_.build_fingerprint) {
    // Checked before anything changes: the job goes on as it was.
    return absl::FailedPreconditionError(absl::StrCat(
        "register ", RoleName(request.role()), " at '", request.address(), "': its build fingerprint is ",
        absl::Hex(request.build_fingerprint()), ", this scheduler's ", absl::Hex(options_.build_fingerprint),
        "; a role of another build cuts keys or initial values differently and would train another model: run "
        "one build of pstrain for the whole job"));
  }
  Deferred deferred;
  RegisterResponse response;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == FAILED) return JobFailedError();
    if (state_ == FINISHED &&
        !membership_.Lookup(request.role(), request.address(), request.instance_id()).has_value()) {
      // E.g. an orchestrator restarted a role after the end: tell it that there is nothing to do.
      LOG(INFO) << "a " << RoleName(request.role()) << " at '" << request.address()
                << "' registered after the job FINISHED; told it the job is over";
      response.set_rank(-1);
      response.set_job_state(FINISHED);
      return response;
    }
    // (A server for a rank a change of the server count adds is no refill.)
    const bool growing = scaling_.pending().has_value() && scaling_.pending()->to > scaling_.pending()->from;
    if (request.role() == SERVER && state_ == RUNNING && options_.job.replicas() == 2 && !growing &&
        !GrowsForLocked(request) && !membership_.Lookup(SERVER, request.address(), request.instance_id()).has_value()) {
      // Replicas: a dead server's shards are served by promoted copies; its rank is not refilled.
      return absl::AlreadyExistsError(absl::StrCat("register server at '", request.address(),
                                                   "': every shard is served (", fleet_.HostsLine(),
                                                   "); with --replicas=2 a dead server's rank is not filled again"));
    }
    const bool grows = GrowsForLocked(request);
    if (grows) {
      // JobSpec.max_servers: the new server is the first of a change to one more.
      RETURN_IF_ERROR(RequestScalingLocked(ServersLocked() + 1,
                                           absl::StrCat("a server registering from '", request.address(), "'"),
                                           &deferred)
                          .status());
    }
    const int64_t changes_before = membership_.changes();
    absl::StatusOr<int> rank =
        membership_.Register(request.role(), request.address(), request.instance_id(), Now(), request.local());
    if (!rank.ok() && grows) {
      CancelScalingLocked(absl::StrCat("the registration that asked for it failed: ", rank.status().message()),
                          &deferred);
    }
    if (!rank.ok() && absl::IsFailedPrecondition(rank.status()) && request.role() == SERVER &&
        RecoversServersLocked()) {
      // A replacement started before its predecessor was declared dead (a launcher restarts a child
      // at once): UNAVAILABLE makes it retry until the dead server's rank is free.
      return absl::UnavailableError(
          absl::StrCat(rank.status().message(), "; a replacement waits until a dead server's rank is free"));
    }
    if (!rank.ok()) return rank.status();
    if (membership_.changes() != changes_before) {  // A new member, not a retry.
      if (state_ == RUNNING && request.role() == SERVER && OutsideMapLocked(*rank)) {
        // A server for a rank a pending scale-up added: it serves from the cut-over on.
        LOG(INFO) << membership_.Describe(SERVER, *rank) << " registered for a rank the job is growing to; "
                  << MembershipLine();
        PublishParticipantsLocked(&deferred);
        AdvanceScalingLocked(&deferred);
      } else if (state_ == RUNNING && request.role() == SERVER) {
        // Only possible with a vacant rank, i.e. during a server recovery.
        fleet_.Fill(*rank);
        CountLeasesLocked(leases_->SetServerCounts(*rank, true), &deferred);
        if (options_.job.mode() != SYNC) {
          // Async updates need no common step: only the replacement goes back, to its own
          // newest checkpoint (restore_own_step below); the others and the workers go on.
          LOG(INFO) << membership_.Describe(SERVER, *rank) << " replaces the dead server " << *rank
                    << " and restores its checkpoint of step " << fleet_.NewestCheckpoint(*rank) << "; "
                    << MembershipLine();
        } else if (fleet_.vacancies().empty()) {
          fleet_.SetRestoreStep(fleet_.RestorableStep(), membership_.epoch());
          progress_->AllowRedo();  // The workers redo the steps after restore_step.
          LOG(INFO) << membership_.Describe(SERVER, *rank) << " replaces the dead server; every server rank "
                    << "is live again; servers restore the checkpoints of step " << *fleet_.restore_step()
                    << " (restore_step, set at membership epoch " << fleet_.restore_epoch() << "); "
                    << MembershipLine();
        } else {
          LOG(INFO) << membership_.Describe(SERVER, *rank)
                    << " replaces a dead server; still vacant: " << fleet_.vacancies().size() << " server ranks; "
                    << MembershipLine();
        }
        PublishParticipantsLocked(&deferred);
      } else if (state_ == RUNNING) {
        LOG(INFO) << membership_.Describe(request.role(), *rank) << " joined the running job; " << MembershipLine();
        PublishParticipantsLocked(&deferred);
      } else {
        LOG(INFO) << "registered " << membership_.Describe(request.role(), *rank) << " ("
                  << membership_.num_live(SERVER) << "/" << options_.job.num_servers() << " servers, "
                  << membership_.num_live(WORKER) << "/" << options_.job.num_workers() << " workers, membership epoch "
                  << membership_.epoch() << ")";
        if (membership_.running() && ModelKnownLocked()) {
          StartRunningLocked(&deferred);
        } else if (membership_.running()) {
          LOG(INFO) << "every role registered; the job runs once a worker declares the model (" << options_.job.model()
                    << " model)";
        }
      }
    }
    membership_.SetMetricsAddress(request.role(), *rank, request.metrics_address());
    response.set_rank(*rank);
    response.set_session_credential(signer_->Sign({request.role(), *rank, request.instance_id()}));
    response.set_job_state(state_);
    *response.mutable_job() = options_.job;
    response.set_heartbeat_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
    response.set_dead_after_ms(absl::ToInt64Milliseconds(options_.dead_after));
    response.set_reconnect_ms(absl::ToInt64Milliseconds(options_.reconnect));
    if (request.role() == SERVER && state_ == RUNNING && options_.job.mode() != SYNC && RecoversServersLocked() &&
        !OutsideMapLocked(*rank)) {
      // A server registering while the job runs is a replacement (a retry gets the same answer:
      // the replacement reports new checkpoints only once it serves).
      response.set_restore_own_step(fleet_.OwnRestoreStep(*rank));
    }
    SaveLocked(&deferred);
  }
  if (absl::Status saved = Run(std::move(deferred)); !saved.ok()) return saved;
  return response;
}

void Scheduler::StartRunningLocked(Deferred* deferred) {
  state_ = RUNNING;
  if (options_.resume_step.has_value()) {
    fleet_.SetRestoreStep(*options_.resume_step, membership_.epoch());
  }
  LOG(INFO) << "every role registered" << (declared_.has_value() ? " and the model is declared" : "")
            << "; job RUNNING; " << MembershipLine();
  deferred->view_waiters.swap(view_waiters_);
  deferred->view_answer = ViewLocked();
  PublishParticipantsLocked(deferred);
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
  RETURN_IF_ERROR(CheckHeartbeatRequest(request));
  Deferred deferred;
  HeartbeatResponse response;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = Now();
    const bool first = !membership_.SinceHeartbeat(request.role(), request.rank(), now).has_value();
    if (absl::Status s = membership_.Heartbeat(request.role(), request.rank(), now); !s.ok()) {
      return s;
    }
    if (request.role() == SERVER) server_reports_.AddHeartbeat(request, now);
    // Kept once per server and change, and saved then.
    const bool resharded =
        request.role() == SERVER && request.has_resharded() && scaling_.Resharded(request.rank(), request.resharded());
    if (resharded) {
      const ReshardReport& r = request.resharded();
      LOG(INFO) << "server " << request.rank() << " serves shard map version " << r.shard_map_version() << " after a "
                << r.pause_ms() << " ms pause; " << r.rows_moved() << " of its " << r.rows() << " rows and "
                << r.bytes_moved() << " of its " << r.bytes() << " bytes were another server's";
    }
    response.set_state(state_);
    response.set_membership_epoch(membership_.epoch());
    if (state_ == FAILED) response.set_failure(std::string(failure_.message()));
    bool completed = false;
    if (request.role() == SERVER) {
      for (int shard : FinalShardsWantedLocked(request.rank())) response.add_send_final_shards(shard);
      // A drained server with a folder of its own holds the only copy of its checkpoints: a
      // recovery before the new map's first cut of its own goes back to the change's cut, and
      // fetches that server's parts of it.
      if (OutsideMapLocked(request.rank()) && MapRestoredLocked() &&
          fleet_.HasOwnCutSinceResume(/*each_rank=*/options_.job.mode() != SYNC)) {
        response.set_map_restored_epoch(fleet_.restore_epoch());
      }
      if (options_.job.mode() != SYNC) {
        // A server with no store yet has applied nothing of its own: it confirms nothing.
        if (!request.restoring()) completed = ConfirmLeasesLocked(request.rank(), request.applied_leases(), &deferred);
        response.set_report_leases_from(leases_->ReportFrom(request.rank()));
        response.set_leases_settled_below(leases_->first_id());
        response.set_checkpoint_at_step(QuietCutForLocked(request, &deferred));
      }
    }
    // Only a role's first heartbeat persists (from then on it is held to dead_after, also by a
    // restarted scheduler), and one that completed leases (what they count must not be lost;
    // confirmations that complete nothing are sent again after a restart).
    if (first || completed || resharded) SaveLocked(&deferred);
  }
  if (absl::Status saved = Run(std::move(deferred)); !saved.ok()) return saved;
  return response;
}

bool Scheduler::MapRestoredLocked() const {
  for (int rank = 0; rank < ServersLocked(); ++rank) {
    if (!membership_.is_live(SERVER, rank) || server_reports_.Restoring(rank) ||
        server_reports_.StoreEpoch(rank) < fleet_.restore_epoch()) {
      return false;
    }
  }
  return true;
}

bool Scheduler::ConfirmLeasesLocked(int server_rank, const AppliedLeases& applied, Deferred* deferred) {
  if (applied.lease_ids_size() == 0) return false;
  int skipped = 0;
  const std::vector<LeaseRecord> completed = leases_->Confirm(server_rank, applied, &skipped);
  if (skipped > 0) {
    VLOG(1) << "server " << server_rank << " confirmed " << skipped << " leases that do not fit the pool (data epoch "
            << applied.data_epoch() << "; the pool is in epoch " << leases_->current_epoch() << "): skipped";
  }
  // A confirmation settles the leases whose holders reported them already: their files may close.
  if (stream_scores_.has_value()) stream_scores_->CloseBefore(stream_->catalog().files(), StreamTrainedLocked());
  return CountLeasesLocked(completed, deferred);
}

bool Scheduler::CountLeasesLocked(const std::vector<LeaseRecord>& completed, Deferred* deferred) {
  for (const LeaseRecord& lease : completed) progress_->CountLease(lease.id, lease.epoch, lease.samples());
  if (completed.empty()) return false;
  MaybeFinishLocked(deferred);
  return true;
}

absl::Status Scheduler::CheckLive(Role role, int rank, absl::string_view what) const {
  if (membership_.is_live(role, rank)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(what, " from ", RoleName(role), " ", rank,
                                                    membership_.ever_registered(role, rank)
                                                        ? ": no longer a member of the job (membership epoch "
                                                        : ": not registered (membership epoch ",
                                                    membership_.epoch(), ")"));
}

void Scheduler::PublishParticipantsLocked(Deferred* deferred) {
  // Until every role has registered the participants are not known; barriers entered before wait.
  if (!membership_.running()) return;
  std::vector<std::string> workers, all;
  for (int rank : membership_.LiveRanks(SERVER)) all.push_back(absl::StrCat(RoleName(SERVER), " ", rank));
  for (int rank : membership_.LiveRanks(WORKER)) workers.push_back(absl::StrCat(RoleName(WORKER), " ", rank));
  all.insert(all.end(), workers.begin(), workers.end());
  barriers_.SetParticipants(BarrierRequest::WORKERS, workers, &deferred->barrier_answers);
  barriers_.SetParticipants(BarrierRequest::ALL, all, &deferred->barrier_answers);
}

void Scheduler::Barrier(const BarrierRequest& request, BarrierSet::Done done) {
  const Role role = request.role() == ROLE_UNSPECIFIED ? WORKER : request.role();
  const BarrierSet::Group group =
      request.participants() == BarrierRequest::ALL ? BarrierRequest::ALL : BarrierRequest::WORKERS;
  // Refused before anything is stored: a barrier is the job's, never made from a caller's name.
  if (absl::Status known = CheckBarrierRequest(request, options_.job.epochs()); !known.ok()) {
    done(std::move(known));
    return;
  }
  if (request.name() == kServersReadyBarrier) {
    // Training starts when this barrier opens; throughput and ETA are measured from then, not
    // from registration (workers load their data in between).
    done = [this, done = std::move(done)](absl::Status status) {
      if (status.ok()) {
        absl::MutexLock lock(&mu_);
        progress_->Start(Now());
      }
      done(std::move(status));
    };
  }
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    absl::Status live = CheckLive(role, request.rank(), absl::StrCat("barrier '", request.name(), "'"));
    if (!live.ok()) {
      deferred.barrier_answers.push_back({std::move(done), std::move(live)});
    } else {
      VLOG(1) << "barrier '" << request.name() << "': " << RoleName(role) << " " << request.rank() << " entered ("
              << BarrierRequest::Participants_Name(group) << ")";
      barriers_.Enter(request.name(), group, absl::StrCat(RoleName(role), " ", request.rank()), std::move(done),
                      &deferred.barrier_answers, Now());
      SaveLocked(&deferred);
    }
  }
  Run(std::move(deferred)).IgnoreError();  // Run logs a failed save; nobody here could retry.
}

absl::StatusOr<LeaseResponse> Scheduler::LeaseWork(const LeaseRequest& request) {
  Deferred deferred;
  absl::StatusOr<LeaseResponse> answer;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == FAILED) return JobFailedError();
    const bool numbered = request.request_seq() > 0 && membership_.is_live(WORKER, request.worker_rank());
    if (numbered) {
      absl::StatusOr<std::optional<LeaseResponse>> retry = retries_.LeaseRetry(request);
      if (!retry.ok()) return retry.status();
      if (retry->has_value()) {
        answer = **retry;
        SaveLocked(&deferred);  // In case saving the first answer failed.
      }
    }
    if (!answer.ok()) {
      answer = LeaseWorkLocked(request);
      if (answer.ok() && numbered) retries_.RecordLease(request, *answer);
      SaveLocked(&deferred);
    }
  }
  if (absl::Status saved = Run(std::move(deferred)); !saved.ok()) return saved;
  return answer;
}

absl::StatusOr<LeaseResponse> Scheduler::LeaseWorkLocked(const LeaseRequest& request) {
  if (state_ == FAILED) return JobFailedError();
  const std::string what = request.eval() ? "evaluation lease request" : "lease request";
  if (!request.eval() && options_.job.mode() == SYNC) {
    return absl::FailedPreconditionError(absl::StrCat("lease for worker ", request.worker_rank(),
                                                      ": the job is in sync mode; leases are for async and ssp"));
  }
  if (state_ == WAITING_FOR_ROLES) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " from worker ", request.worker_rank(), ": not every role has registered yet"));
  }
  if (absl::Status s = CheckLive(WORKER, request.worker_rank(), what); !s.ok()) return s;
  LeaseResponse response;
  if (request.eval()) {
    if (!EpochTrainedLocked(request.epoch())) {
      // Evaluation leases of an epoch go out only at its end: nobody can take (and score) an
      // epoch's test set before its training is over. Honest workers asking early ask again.
      // A SYNC worker that reported the epoch's end waits for the others from now on (the
      // hold-up rule, EvictHoldUpsLocked); a request from one that did not starts no wait.
      if (options_.job.mode() == SYNC &&
          progress_->worker_step(request.worker_rank()) >= SyncEpochEndStepLocked(request.epoch()) &&
          (!eval_waiting_.has_value() || eval_waiting_->first != request.epoch())) {
        eval_waiting_.emplace(request.epoch(), Now());
      }
      response.set_wait(true);
      VLOG(1) << "evaluation lease request from worker " << request.worker_rank() << " for epoch " << request.epoch()
              << ": its training is not over yet; wait";
      return response;
    }
    absl::StatusOr<EvalLease> lease = progress_->LeaseEval(request.worker_rank(), request.epoch(), Now());
    if (!lease.ok()) return lease.status();
    response.set_wait(lease->wait);
    response.set_epoch_done(lease->epoch_done);
    response.set_lease_id(lease->id);
    response.set_begin(lease->begin);
    response.set_end(lease->end);
    VLOG(1) << "evaluation lease " << lease->id << " for worker " << request.worker_rank() << " epoch "
            << request.epoch() << ": [" << lease->begin << ", " << lease->end << ")" << (lease->wait ? " wait" : "")
            << (lease->epoch_done ? " epoch done" : "");
    return response;
  }
  leases_->set_hold_fresh(HoldsFreshLeasesLocked());
  absl::StatusOr<Lease> lease = leases_->Next(request.worker_rank(), request.epoch());
  if (!lease.ok()) return lease.status();
  response.set_wait(lease->wait);
  response.set_epoch_done(lease->epoch_done);
  response.set_lease_id(lease->id);
  response.set_begin(lease->begin);
  response.set_end(lease->end);
  response.set_first_batch(lease->first_batch);
  if (!lease->wait && !lease->epoch_done) {
    // What the worker's pushes of this lease show the servers (common/session_credential.h), with
    // the time that is their eviction clock (EvictionSpec.ttl_seconds).
    const int64_t granted = std::max<int64_t>(0, absl::ToUnixMillis(Now()));
    response.set_granted_unix_ms(granted);
    response.set_grant(signer_->SignLease(
        {request.worker_rank(), lease->epoch, lease->id, lease->begin, lease->end, lease->first_batch, granted}));
  }
  if (lease->first_batch > 0) {
    LOG(INFO) << "worker " << request.worker_rank() << " takes over lease " << lease->id << " of epoch "
              << request.epoch() << " from batch " << lease->first_batch;
  }
  VLOG(1) << "lease " << lease->id << " for worker " << request.worker_rank() << " epoch " << request.epoch() << ": ["
          << lease->begin << ", " << lease->end << ") from batch " << lease->first_batch << (lease->wait ? " wait" : "")
          << (lease->epoch_done ? " epoch done" : "");
  return response;
}

absl::Status Scheduler::ReportProgress(const ProgressReport& report) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == FAILED) return JobFailedError();
    const int rank = report.worker_rank();
    if (!membership_.ever_registered(WORKER, rank)) {
      return absl::FailedPreconditionError(absl::StrCat("progress report from worker ", rank, ": not registered"));
    }
    const int64_t seq = report.report_seq();
    if (retries_.ProgressApplied(rank, seq)) {
      // Applied already; its answer was lost (e.g. the scheduler restarted) and the worker retried.
      VLOG(1) << "progress report " << seq << " from worker " << rank << " was applied already";
      SaveLocked(&deferred);  // In case saving it the first time failed.
    } else {
      // A removed worker's applied steps and evaluations count. Its done is recorded but never
      // read: only live workers' done flags end the job, and a worker's rank is never reused.
      if (absl::Status s = leases_->Check(report); !s.ok()) return s;
      if (stream_scores_.has_value()) {
        const int64_t files = static_cast<int64_t>(stream_->catalog().files().size());
        if (absl::Status s = stream_scores_->Check(report.train(), rank, files); !s.ok()) return s;
      }
      const int64_t batch_budget = options_.job.mode() == SYNC ? -1 : leases_->BatchesHandedTo(rank);
      if (absl::Status s = progress_->Add(report, Now(), batch_budget); !s.ok()) return s;
      for (const LeaseRecord& lease : leases_->Record(report)) {
        progress_->CountLease(lease.id, lease.epoch, lease.samples());
      }
      if (stream_scores_.has_value()) {
        stream_scores_->Add(report.train());
        stream_scores_->CloseBefore(stream_->catalog().files(), StreamTrainedLocked());
      }
      retries_.RecordProgress(rank, seq);
      if (report.evals_size() > 0) {
        VLOG(1) << "worker " << rank << " reported " << report.evals_size() << " evaluation leases of epoch "
                << report.epoch();
      }
      MaybeFinishLocked(&deferred);
      SaveLocked(&deferred);
    }
  }
  return Run(std::move(deferred));
}

absl::Status Scheduler::Leave(const LeaveRequest& request) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    const bool outside_server =
        request.role() == SERVER && membership_.is_live(SERVER, request.rank()) && OutsideMapLocked(request.rank());
    if (outside_server) {
      // Drained by a scale-down (or added by a pending scale-up and stopped): it holds no shard.
      RemoveOutsideServerLocked(request.rank(), ChangeKind::kLeft,
                                request.reason().empty() ? "no reason given" : BoundedReason(request.reason()),
                                &deferred);
    } else if (request.role() == SERVER && membership_.is_live(SERVER, request.rank())) {
      if (Ended()) return absl::OkStatus();
      RETURN_IF_ERROR(DrainServerLocked(
          request.rank(), request.reason().empty() ? "no reason given" : BoundedReason(request.reason()), &deferred));
    } else if (request.role() != WORKER) {
      return absl::FailedPreconditionError(absl::StrCat("leave from ", RoleName(request.role()), " ", request.rank(),
                                                        ": only workers and live servers may leave a job"));
    } else if (!membership_.ever_registered(WORKER, request.rank())) {
      return absl::FailedPreconditionError(absl::StrCat("leave from worker ", request.rank(), ": not registered"));
    } else if (Ended()) {
      return absl::OkStatus();
    } else {
      RemoveWorkerLocked(request.rank(), ChangeKind::kLeft,
                         absl::StrCat(membership_.Describe(WORKER, request.rank()), " left: ",
                                      request.reason().empty() ? "no reason given" : BoundedReason(request.reason())),
                         &deferred);
    }
    SaveLocked(&deferred);
  }
  return Run(std::move(deferred));
}

void Scheduler::RemoveWorkerLocked(int rank, ChangeKind kind, absl::string_view reason, Deferred* deferred) {
  absl::StatusOr<bool> removed = membership_.Remove(WORKER, rank, kind, Now());
  if (!removed.ok() || !*removed) return;
  const int returned = progress_->WorkerGone(rank);
  const int remainders = leases_->Release(rank);
  // The membership remembers only the newest gone workers: what is kept by rank goes with them.
  // The predicate runs inside each call, under mu_ (which a lambda must declare for the
  // thread-safety analysis: it cannot see that its caller holds the lock).
  auto forgotten = [this](int r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return membership_.forgotten(WORKER, r); };
  progress_->ForgetWorkers(forgotten);
  leases_->ForgetWorkers(forgotten);
  retries_.Forget(forgotten);
  LOG(INFO) << "worker " << rank << " " << ChangeKindName(kind) << " (" << reason << ")"
            << (returned > 0 ? absl::StrCat("; ", returned, " evaluation leases back in the pool") : "")
            << (remainders > 0 ? absl::StrCat("; ", remainders, " training leases back as remainders") : "") << "; "
            << MembershipLine();
  PublishParticipantsLocked(deferred);
  if (state_ != RUNNING) return;  // Before the job runs, another worker may still take the slot.
  // Training is over (the job waits for the final shards): a worker leaving costs nothing.
  if (progress_->finished()) return;
  const int live = membership_.num_live(WORKER);
  if (live < options_.job.min_workers()) {
    EndLocked(FAILED,
              absl::UnavailableError(
                  absl::StrFormat("only %d live worker%s left; the job needs at least %d (--min_workers); %s", live,
                                  live == 1 ? "" : "s", options_.job.min_workers(), reason)),
              deferred);
    return;
  }
  MaybeFinishLocked(deferred);
}

void Scheduler::MaybeFinishLocked(Deferred* deferred) {
  if (state_ != RUNNING) return;
  // Once true, TryFinish stays true: training is over even if done workers leave afterwards.
  const bool trained_before = progress_->finished();
  if (!progress_->TryFinish(membership_.LiveRanks(WORKER), Now())) return;
  if (NeedsFinalModel() && !final_model_.written()) {
    if (!trained_before) {
      LOG(INFO) << "every live worker is done; waiting for the servers' final shards to write "
                << options_.job.final_model_path() << "; " << MembershipLine();
    }
    return;
  }
  LOG(INFO) << "every live worker is done; job FINISHED; " << MembershipLine();
  EndLocked(FINISHED, absl::OkStatus(), deferred);
}

void Scheduler::ReportFailure(const FailureReport& report) {
  const std::string message = BoundedReason(report.message());
  std::string who;
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    who = membership_.Describe(report.role(), report.rank());
    const bool removed = report.role() == WORKER || membership_.ever_registered(report.role(), report.rank());
    if (removed && !membership_.is_live(report.role(), report.rank())) {
      // A worker the job already went on without (declared dead, or left), or a server declared
      // dead (its rank waits for a replacement): its failure is its own.
      LOG(WARNING) << "ignoring the failure of " << who << ", no longer a member: " << message;
      return;
    }
    if (report.role() == WORKER) {
      // A worker speaks for itself only: it leaves, and the job fails only by a rule the
      // scheduler checks (fewer than min_workers left), quoting the workers' messages.
      if (Ended()) return;
      const std::string reason = absl::StrCat(who, " failed: ", message);
      std::string earlier;
      for (const std::string& m : worker_failures_) absl::StrAppend(&earlier, earlier.empty() ? "" : "; ", m);
      worker_failures_.push_back(reason);
      if (worker_failures_.size() > kMaxFailureMessages) worker_failures_.pop_front();
      RemoveWorkerLocked(report.rank(), ChangeKind::kLeft,
                         earlier.empty() ? reason : absl::StrCat(reason, " (earlier: ", earlier, ")"), &deferred);
      SaveLocked(&deferred);
    }
  }
  if (report.role() == WORKER) {
    Run(std::move(deferred)).IgnoreError();  // Run logs a failed save; the worker exits anyway.
    return;
  }
  Fail(absl::AbortedError(absl::StrCat(who, ": ", message)));
}

void Scheduler::Fail(absl::Status reason) {
  if (reason.ok()) reason = absl::UnknownError("job failed without a reason");
  // The reason is kept in the state file's `string` field, which protobuf refuses to parse unless
  // it is UTF-8: a message quoting a peer's bytes must not make the saved state unreadable.
  if (!IsValidUtf8(reason.message())) reason = absl::Status(reason.code(), ToValidUtf8(reason.message()));
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) {
      LOG(WARNING) << "after the job ended: " << reason;
      return;
    }
    EndLocked(FAILED, std::move(reason), &deferred);
  }
  Run(std::move(deferred)).IgnoreError();  // Run logs a failed save; nobody here could retry.
}

void Scheduler::EndLocked(JobState state, absl::Status failure, Deferred* deferred) {
  state_ = state;
  failure_ = std::move(failure);
  ended_at_ = Now();
  if (state_ == FAILED) LOG(ERROR) << "job FAILED: " << failure_.message();
  for (ViewDone& done : view_waiters_) deferred->view_waiters.push_back(std::move(done));
  view_waiters_.clear();
  absl::Status barrier_answer;
  if (state_ == FAILED) {
    barrier_answer = JobFailedError();
    deferred->view_answer = barrier_answer;
  } else {
    barrier_answer = absl::AbortedError("job finished");
    deferred->view_answer = ViewLocked();
  }
  barriers_.FailAll(barrier_answer, &deferred->barrier_answers);
  SaveLocked(deferred);
}

void Scheduler::CheckHealth() {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;
    const int64_t changes_before = membership_.changes();
    const size_t vacant_before = fleet_.vacancies().size();
    const absl::Time now = Now();
    std::vector<SilentMember> silent = membership_.FindDead(now);
    const size_t dead = silent.size();
    std::vector<SilentMember> never_started = membership_.FindNeverStarted(now, options_.startup_timeout);
    silent.insert(silent.end(), never_started.begin(), never_started.end());
    std::vector<std::string> dead_servers, silent_servers;
    std::vector<SilentMember> replaceable_servers;
    for (size_t i = 0; i < silent.size(); ++i) {
      if (silent[i].role != SERVER) continue;
      if ((i < dead && (RecoversServersLocked() || PromotesReplicasLocked())) || OutsideMapLocked(silent[i].rank)) {
        replaceable_servers.push_back(silent[i]);
      } else {
        (i < dead ? dead_servers : silent_servers).push_back(silent[i].message);
      }
    }
    std::vector<std::string> unreplaced;
    for (const auto& [rank, died] : fleet_.vacancies()) {
      if (now - died > options_.server_recovery_timeout) {
        unreplaced.push_back(absl::StrFormat("server %d died and no replacement registered within %g s", rank,
                                             absl::ToDoubleSeconds(options_.server_recovery_timeout)));
      }
    }
    if (!dead_servers.empty()) {
      EndLocked(FAILED, absl::UnavailableError(absl::StrJoin(dead_servers, "; ")), &deferred);
    } else if (!silent_servers.empty()) {
      EndLocked(FAILED, absl::DeadlineExceededError(absl::StrJoin(silent_servers, "; ")), &deferred);
    } else if (!unreplaced.empty()) {
      EndLocked(FAILED, absl::UnavailableError(absl::StrJoin(unreplaced, "; ")), &deferred);
    } else if (state_ == WAITING_FOR_ROLES && now - created_ > options_.startup_timeout) {
      EndLocked(
          FAILED,
          absl::DeadlineExceededError(
              membership_.running()
                  ? absl::StrCat("every role registered, but no worker declared the model (model '",
                                 options_.job.model(), "') within ", absl::FormatDuration(options_.startup_timeout))
                  : absl::StrFormat("only %d of %d servers and %d of %d workers registered within %s",
                                    membership_.num_live(SERVER), options_.job.num_servers(),
                                    membership_.num_live(WORKER), options_.job.num_workers(),
                                    absl::FormatDuration(options_.startup_timeout))),
          &deferred);
    } else {
      for (const SilentMember& server : replaceable_servers) RemoveServerLocked(server.rank, server.message, &deferred);
      for (const SilentMember& worker : silent) {
        if (Ended()) break;
        if (worker.role != WORKER) continue;
        RemoveWorkerLocked(worker.rank, ChangeKind::kDied, worker.message, &deferred);
      }
    }
    if (leases_ == nullptr || leases_->EpochEndWaitsFor().empty()) {
      epoch_end_waiting_since_.reset();
    } else if (!epoch_end_waiting_since_.has_value()) {
      epoch_end_waiting_since_ = now;
    }
    if (!Ended()) CancelLateScalingLocked(now, &deferred);
    if (!Ended()) EvictHoldUpsLocked(now, &deferred);
    if (!Ended()) stuck_log_.Update(StuckBarriersLocked(now), now);
    // Most ticks change nothing; those that do persist (EndLocked saves on its own).
    if (membership_.changes() != changes_before || fleet_.vacancies().size() != vacant_before) SaveLocked(&deferred);
  }
  Run(std::move(deferred)).IgnoreError();  // Run logs a failed save; nobody here could retry.
}

JobStatus Scheduler::Status() const {
  absl::MutexLock lock(&mu_);
  JobStatus status = progress_->Status(Now());
  status.set_state(state_);
  if (state_ == FAILED) status.set_failure(std::string(failure_.message()));
  status.set_registered_servers(membership_.num_live(SERVER));
  status.set_registered_workers(membership_.num_live(WORKER));
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
  std::string slow = server_reports_.SlowStepsJson() + server_reports_.ServersJson();
  absl::StrAppend(&slow, "  \"stuck_barriers\": ", StuckBarriersJson(stuck_log_.Kept()), ",\n");
  absl::StrAppend(&slow, "  \"worker_failures\": [");
  for (size_t i = 0; i < worker_failures_.size(); ++i) {
    absl::StrAppend(&slow, i == 0 ? "" : ", ", JsonString(worker_failures_[i]));
  }
  slow += "],\n";
  if (stream_.has_value()) {
    absl::StrAppend(&slow, "  \"stream\": ", StreamStatusJson(StreamStatusLocked(std::numeric_limits<size_t>::max())),
                    ",\n");
  }
  if (const std::vector<ServerCountChangeStatus> changes = ServerCountChangesLocked(); !changes.empty()) {
    absl::StrAppend(&slow, "  \"server_count_changes\": ", ServerCountChangesJson(changes), ",\n");
  }
  if (options_.resume_step.has_value()) {
    absl::StrAppend(&slow, "  \"resumed\": {\"step\": ", *options_.resume_step, ", \"from_servers\": ",
                    options_.resume_servers > 0 ? options_.resume_servers : options_.job.num_servers(),
                    ", \"servers\": ", options_.job.num_servers(), "},\n");
  }
  return progress_->SummaryJson(state_, failure_.message(), Now(), membership_.events(), membership_.LiveRanks(WORKER),
                                slow + server_reports_.TableUsageJson(membership_.LiveRanks(SERVER)));
}

std::string Scheduler::OutcomeLine() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = Now();
  std::string line = absl::StrCat("job ", JobState_Name(state_));
  if (state_ == FAILED) absl::StrAppend(&line, " (", failure_.message(), ")");
  const std::optional<double> accuracy = progress_->final_test_accuracy();
  const std::optional<double> loss = progress_->final_test_loss();
  if (accuracy.has_value())
    absl::StrAppendFormat(&line, ": test accuracy %.4f", *accuracy);
  else
    absl::StrAppend(&line, ": no test accuracy");
  if (loss.has_value()) absl::StrAppendFormat(&line, ", test loss %.4f", *loss);
  if (const std::optional<Progress::FinalAuc> auc = progress_->final_test_auc(); auc.has_value()) {
    absl::StrAppendFormat(&line, ", test AUC %.4f", auc->auc);
  }
  absl::StrAppendFormat(&line, ", %.0f samples/s", progress_->samples_per_second(now));
  return line;
}

}  // namespace scheduler
}  // namespace pstrain
