#include "worker/trainer.h"

#include <algorithm>
#include <utility>

#include <glog/logging.h>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/step_times.h"
#include "data/batch.h"
#include "data/permutation.h"

namespace pstrain::worker {
namespace {

// How long to wait before asking again when a server has not yet learnt the newest membership
// epoch, or the scheduler has no evaluation lease free yet.
constexpr absl::Duration kRetryPause = absl::Milliseconds(25);
// How long a worker watches the view for a server that stopped answering before it tries again.
constexpr absl::Duration kUnavailablePatience = absl::Seconds(1);

std::string LiveRanks(const ClusterView& view) {
  std::vector<int> ranks;
  for (const WorkerInfo& w : view.workers()) ranks.push_back(w.rank());
  return absl::StrJoin(ranks, ",");
}

std::vector<int64_t> TensorElements(const std::vector<model::ParamSpec>& params) {
  std::vector<int64_t> elements;
  for (const model::ParamSpec& p : params) elements.push_back(p.num_elements);
  return elements;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(TrainerOptions options,
                                                        SchedulerClient* scheduler, PsClient* ps,
                                                        model::Model* model, const data::Dataset* train,
                                                        const data::Dataset* test) {
  if (train->features() != model->input_size() || test->features() != model->input_size()) {
    return absl::InvalidArgumentError(absl::StrCat("data has ", train->features(),
                                                   " features per sample, the model expects ",
                                                   model->input_size()));
  }
  if (options.view.workers_size() < 1) return absl::InvalidArgumentError("cluster view lists no workers");
  if (options.job.mode() == SYNC && options.view.global_batch() < 1) {
    return absl::InvalidArgumentError("cluster view: global_batch is not set for a sync job");
  }
  // Shards are the job's server ranks; with replicas a dead server's rank may be missing from the
  // view (and so from the client), its shard served by another server.
  const int num_shards = options.job.num_servers() > 0 ? options.job.num_servers() : ps->num_servers();
  ASSIGN_OR_RETURN(ShardLayout layout, ShardLayout::Create(options.view.shard_map(), num_shards, model->params()));
  RETURN_IF_ERROR(ShardRoutes(options.view, num_shards).status());
  ASSIGN_OR_RETURN(const Compression compression, ParseCompression(options.job.compression()));
  auto trainer = std::unique_ptr<Trainer>(
      new Trainer(std::move(options), scheduler, ps, model, train, test, std::move(layout)));
  ASSIGN_OR_RETURN(trainer->encoder_, PushEncoder::Create(compression, &trainer->layout_));
  return trainer;
}

Trainer::Trainer(TrainerOptions options, SchedulerClient* scheduler, PsClient* ps, model::Model* model,
                 const data::Dataset* train, const data::Dataset* test, ShardLayout layout)
    : options_(std::move(options)),
      scheduler_(scheduler),
      ps_(ps),
      model_(model),
      train_(train),
      test_(test),
      layout_(std::move(layout)),
      view_(options_.view),
      weights_(model->num_parameters()),
      grad_(model->num_parameters()),
      push_(layout_.num_servers()),
      pulled_(layout_.num_servers()),
      pusher_(&layout_, ps, TensorElements(model->params())),
      // Request ids only need to differ between the pushes of one rank (ranks are never reused);
      // a random start also keeps ids of different jobs apart in logs.
      next_request_id_(absl::Uniform<uint64_t>(absl::BitGen()) | 1) {
  // A sync slice grows when workers leave (the global batch is shared by fewer); at most the
  // whole global batch.
  const int64_t largest = std::max<int64_t>(options_.job.batch_size(), view_.global_batch());
  batch_x_.resize(static_cast<size_t>(largest) * train_->features());
  batch_y_.resize(largest);
  pending_.set_worker_rank(options_.rank);
}

absl::Status Trainer::Run() {
  LOG(INFO) << "worker " << options_.rank << " (live workers " << LiveRanks(view_) << "): training "
            << model_->num_parameters() << " parameters on " << train_->num_samples << " samples, mode "
            << Mode_Name(options_.job.mode());
  ASSIGN_OR_RETURN(routes_, ShardRoutes(view_, layout_.num_servers()));
  if (options_.job.mode() == SYNC) return RunSync();
  return RunLeased();
}

absl::Status Trainer::RunSync() {
  const JobSpec& job = options_.job;
  const int64_t n = train_->num_samples;
  const int64_t steps_per_epoch = data::SyncStepsPerEpoch(n, view_.global_batch());
  const int64_t total_steps = view_.total_steps();
  // A worker joining a running job starts where the servers are. (If it catches them mid-step,
  // some shards may be one step ahead; the first gradient then uses those slightly newer weights.)
  ASSIGN_OR_RETURN(global_step_, PullWeightsWhenCurrent(/*step=*/0, /*epoch=*/0));
  if (global_step_ > 0) LOG(INFO) << "starting at step " << global_step_ << ", where the servers are (a running or resumed job)";
  std::vector<int64_t> perm;
  int perm_epoch = -1;
  while (global_step_ < total_steps) {
    const int epoch = static_cast<int>(global_step_ / steps_per_epoch);
    if (epoch != perm_epoch) {
      perm = data::EpochPermutation(job.seed(), epoch, n);
      perm_epoch = epoch;
    }
    RETURN_IF_ERROR(SyncStep(perm, global_step_ % steps_per_epoch, epoch));
    if (rewind_to_.has_value()) {
      // The servers rolled back to a checkpoint: go back to its step and its data position.
      LOG(INFO) << "rewinding from step " << global_step_ << " to step " << *rewind_to_
                << ", where the servers restored their checkpoints";
      global_step_ = *rewind_to_;
      rewind_to_.reset();
      encoder_->Reset();
      RETURN_IF_ERROR(PullWeightsWhenCurrent(global_step_, epoch).status());
      continue;
    }
    ++global_step_;
    if (LeaveRequested()) return Leave(epoch);
    RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/false));
    if (global_step_ % steps_per_epoch == 0 || global_step_ == total_steps) {
      RETURN_IF_ERROR(EndEpoch(epoch, /*last=*/epoch == job.epochs() - 1 || global_step_ == total_steps));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::SyncStep(const std::vector<int64_t>& perm, int64_t step_in_epoch, int epoch) {
  const absl::Time give_up = absl::Now() + options_.membership_timeout;
  while (true) {
    ASSIGN_OR_RETURN(const int slot, Slot());
    data::Range slice = data::SyncSliceOfGlobalBatch(train_->num_samples, view_.global_batch(),
                                                     view_.workers_size(), slot, step_in_epoch);
    const double every = options_.job.checkpoint_every_seconds();
    ask_checkpoint_ = slot == 0 && every > 0 && absl::Now() - last_checkpoint_ask_ >= absl::Seconds(every);
    absl::Status status = Step(perm, slice, global_step_, epoch);
    if (status.ok() && ask_checkpoint_) last_checkpoint_ask_ = absl::Now();
    ask_checkpoint_ = false;
    // ABORTED: the membership changed (or a server has not learnt the newest epoch yet).
    // UNAVAILABLE: a server is down; with checkpoints, the scheduler waits for a replacement.
    if (!absl::IsAborted(status) && !absl::IsUnavailable(status)) return status;
    RETURN_IF_ERROR(AwaitMembership(status, give_up));
    if (rewind_to_.has_value()) return absl::OkStatus();
    // Otherwise recompute the same global batch under the current view.
  }
}

absl::StatusOr<ClusterView> Trainer::FetchView(absl::Time give_up) {
  ASSIGN_OR_RETURN(ClusterView view, scheduler_->GetClusterView());
  // A dead server's rank waits for a replacement (no replicas): until one registers, a retry would
  // only recompute the step and push it again to the servers that already have it.
  while (view.state() == RUNNING && view.shard_hosts_size() == 0 && view.servers_size() < layout_.num_servers()) {
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat("step ", global_step_, ": ", view.servers_size(), " of ",
                                                      layout_.num_servers(), " servers live for ",
                                                      absl::FormatDuration(options_.membership_timeout)));
    }
    absl::SleepFor(kRetryPause);
    ASSIGN_OR_RETURN(view, scheduler_->GetClusterView());
  }
  if (view.state() == FAILED) return absl::AbortedError(absl::StrCat("job failed: ", view.failure()));
  return view;
}

absl::Status Trainer::AwaitMembership(const absl::Status& aborted, absl::Time give_up) {
  if (absl::Now() > give_up) {
    return absl::DeadlineExceededError(absl::StrCat("step ", global_step_, " kept failing for ",
                                                    absl::FormatDuration(options_.membership_timeout),
                                                    "; last: ", aborted.message()));
  }
  ASSIGN_OR_RETURN(ClusterView view, FetchView(give_up));
  if (absl::IsUnavailable(aborted)) {
    // A server that does not answer is most likely dead, and the scheduler says so within
    // dead_after. Watching the view meanwhile is cheap; pushing the step again every pause would
    // repeat it on every other server. Past kUnavailablePatience the step is tried again anyway
    // (the server may have been only slow).
    const absl::Time patience_end = absl::Now() + kUnavailablePatience;
    while (view.membership_epoch() <= view_.membership_epoch() && absl::Now() < patience_end) {
      absl::SleepFor(kRetryPause);
      ASSIGN_OR_RETURN(view, FetchView(give_up));
    }
  }
  if (view.membership_epoch() > view_.membership_epoch()) {
    LOG(INFO) << "step " << global_step_ << ": membership epoch " << view_.membership_epoch() << " -> "
              << view.membership_epoch() << ", live workers " << LiveRanks(view);
    if (view.has_restore_step() && view.restore_epoch() > view_.restore_epoch() &&
        view.restore_step() < global_step_) {
      rewind_to_ = view.restore_step();
    }
    ASSIGN_OR_RETURN(routes_, ShardRoutes(view, layout_.num_servers()));
    ps_->UpdateServers(view);
    view_ = std::move(view);
  } else {
    VLOG(1) << "step " << global_step_ << ": " << aborted.message() << "; retrying";
    absl::SleepFor(kRetryPause);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Trainer::PullWeightsWhenCurrent(int64_t step, int epoch) {
  const absl::Time give_up = absl::Now() + options_.membership_timeout;
  while (true) {
    absl::StatusOr<int64_t> pulled = PullWeights(step, epoch);
    if (!absl::IsAborted(pulled.status()) && !absl::IsUnavailable(pulled.status())) return pulled;
    RETURN_IF_ERROR(AwaitMembership(pulled.status(), give_up));
  }
}

absl::StatusOr<int> Trainer::Slot() const {
  for (int i = 0; i < view_.workers_size(); ++i) {
    if (view_.workers(i).rank() == options_.rank) return i;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "worker ", options_.rank, " is no longer a member of the job (membership epoch ",
      view_.membership_epoch(), ", live workers ", LiveRanks(view_), "): it was declared dead"));
}

absl::Status Trainer::RunLeased() {
  const JobSpec& job = options_.job;
  const int64_t n = train_->num_samples;
  RETURN_IF_ERROR(PullWeightsWhenCurrent(/*step=*/0, /*epoch=*/0).status());
  for (int epoch = 0; epoch < job.epochs(); ++epoch) {
    std::vector<int64_t> perm = data::EpochPermutation(job.seed(), epoch, n);
    int64_t clock = 0;  // Pushes this epoch: the SSP clock.
    bool finished = false;  // FinishEpoch sent: this worker no longer holds others back.
    while (true) {
      if (LeaveRequested()) return Leave(epoch);
      ASSIGN_OR_RETURN(LeaseResponse lease, scheduler_->LeaseWork(options_.rank, epoch));
      if (lease.epoch_done() || lease.wait()) {
        if (!finished) {
          RETURN_IF_ERROR(FinishEpoch(epoch));
          finished = true;
        }
        if (lease.epoch_done()) break;
        absl::SleepFor(kRetryPause);  // Leases are out; one may come back if its holder dies.
        continue;
      }
      data::Range range{lease.begin(), lease.end()};
      const int64_t batches = range.begin >= 0 && range.end <= n && range.begin < range.end
                                  ? data::NumBatches(range, job.batch_size())
                                  : 0;
      if (batches == 0 || lease.first_batch() < 0 || lease.first_batch() >= batches) {
        return absl::DataLossError(absl::StrCat("lease ", lease.lease_id(), " covers [", range.begin, ", ",
                                                range.end, ") from batch ", lease.first_batch(),
                                                ", outside the epoch of ", n, " samples"));
      }
      for (int64_t b = lease.first_batch(); b < batches; ++b) {
        const absl::Time give_up = absl::Now() + options_.membership_timeout;
        for (absl::Status s = Step(perm, data::BatchOf(range, job.batch_size(), b), clock, epoch,
                                   lease.lease_id(), b);
             !s.ok();
             s = Step(perm, data::BatchOf(range, job.batch_size(), b), clock, epoch, lease.lease_id(), b)) {
          // The membership changed: push the same batch again under the new view; servers that
          // applied it already skip it. A dead server (UNAVAILABLE) is such a change too when its
          // shard's copy is promoted (replicas) or a replacement restores its checkpoint.
          if (!absl::IsAborted(s) && !(absl::IsUnavailable(s) && ServersRecover())) return s;
          RETURN_IF_ERROR(AwaitMembership(s, give_up));
        }
        ++clock;
        ++global_step_;
        RecordLeaseProgress(lease.lease_id(), b + 1);
        // A completed lease is reported at once: only complete leases count, and the epoch ends
        // when every lease is complete.
        RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/b + 1 == batches));
      }
    }
    RETURN_IF_ERROR(scheduler_->Barrier(absl::StrCat("epoch-", epoch, "-trained"), BarrierRequest::WORKERS,
                                        WORKER, options_.rank, options_.barrier_timeout));
    // Every push of the epoch is applied now; everyone evaluates the same weights.
    RETURN_IF_ERROR(PullWeightsWhenCurrent(/*step=*/0, epoch).status());
    RETURN_IF_ERROR(EndEpoch(epoch, epoch == job.epochs() - 1));
  }
  return absl::OkStatus();
}

absl::Status Trainer::FinishEpoch(int epoch) {
  std::vector<FinishEpochRequest> finish(layout_.num_servers());
  for (int s = 0; s < layout_.num_servers(); ++s) {
    finish[s].set_worker_rank(options_.rank);
    finish[s].set_data_epoch(epoch);
    finish[s].set_shard(s);
  }
  const absl::Time give_up = absl::Now() + options_.membership_timeout;
  for (absl::Status s = ps_->FinishEpochShards(routes_, finish); !s.ok();
       s = ps_->FinishEpochShards(routes_, finish)) {
    if (!absl::IsAborted(s) && !(absl::IsUnavailable(s) && ServersRecover())) return s;
    RETURN_IF_ERROR(AwaitMembership(s, give_up));  // A server has not learnt of this worker yet.
  }
  return absl::OkStatus();
}

void Trainer::RecordLeaseProgress(int64_t lease_id, int64_t batches_done) {
  for (LeaseProgress& p : *pending_.mutable_leases()) {
    if (p.lease_id() == lease_id) {
      p.set_batches_done(batches_done);
      return;
    }
  }
  LeaseProgress* p = pending_.add_leases();
  p->set_lease_id(lease_id);
  p->set_batches_done(batches_done);
}

absl::Status Trainer::Step(const std::vector<int64_t>& perm, data::Range range, int64_t step, int epoch,
                           int64_t lease_id, int64_t lease_batch) {
  const absl::Time start = absl::Now();
  const int count = static_cast<int>(range.size());
  data::GatherRange(*train_, perm, range, batch_x_.data(), batch_y_.data());
  model::BatchStats stats;
  StepTimes times;
  times.set_compute_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  RETURN_IF_ERROR(OverlapOn(options_.job)
                      ? PushDuringBackward(count, step, epoch, &stats, &times)
                      : PushAfterBackward(count, step, epoch, lease_id, lease_batch, &stats, &times));
  // Counted only now: an aborted step is recomputed, and its samples must count once.
  TrainStats* train = pending_.mutable_train();
  train->set_loss_sum(train->loss_sum() + stats.loss_sum);
  train->set_samples(train->samples() + count);
  train->set_steps(train->steps() + 1);
  times.set_steps(1);
  AddStepTimes(times, pending_.mutable_step_times());
  return absl::OkStatus();
}

void Trainer::FillPushHeader(int64_t step, int epoch, int count, int64_t lease_id, int64_t lease_batch,
                             PushRequest* push) const {
  push->set_worker_rank(options_.rank);
  push->set_membership_epoch(view_.membership_epoch());
  push->set_step(step);
  push->set_data_epoch(epoch);
  push->set_num_samples(count);
  push->set_lease_id(lease_id);
  push->set_lease_batch(lease_batch);
  push->set_checkpoint(ask_checkpoint_);
}

absl::Status Trainer::PushAfterBackward(int count, int64_t step, int epoch, int64_t lease_id, int64_t lease_batch,
                                        model::BatchStats* stats, StepTimes* times) {
  absl::Time t = absl::Now();
  RETURN_IF_ERROR(model_->ComputeGradient(batch_x_.data(), batch_y_.data(), count, absl::MakeSpan(grad_), stats));
  absl::Time now = absl::Now();
  times->set_compute_seconds(times->compute_seconds() + absl::ToDoubleSeconds(now - t));
  t = now;
  const uint64_t request_id = next_request_id_++;
  for (int s = 0; s < layout_.num_servers(); ++s) {
    OutgoingPush& push = push_[s];
    push.header.set_shard(s);
    // The copy must have applied the step before this worker moves on (see PsClient).
    push.header.set_wait_until_applied(routes_[s].backup >= 0);
    push.header.set_request_id(request_id);
    FillPushHeader(step, epoch, count, lease_id, lease_batch, &push.header);
    layout_.FillPush(s, grad_.data(), &push);
    RETURN_IF_ERROR(encoder_->Encode(s, /*first=*/0, &push));
  }
  now = absl::Now();
  times->set_push_seconds(absl::ToDoubleSeconds(now - t));
  t = now;
  RETURN_IF_ERROR(ps_->PushPullShards(routes_, push_, &pulled_));
  now = absl::Now();
  times->set_wait_seconds(absl::ToDoubleSeconds(now - t));
  t = now;
  RETURN_IF_ERROR(InstallWeights());
  times->set_pull_seconds(absl::ToDoubleSeconds(absl::Now() - t));
  return absl::OkStatus();
}

absl::Status Trainer::PushDuringBackward(int count, int64_t step, int epoch, model::BatchStats* stats,
                                         StepTimes* times) {
  FillPushHeader(step, epoch, count, /*lease_id=*/0, /*lease_batch=*/0, &header_);
  // The same step under the same view sends the same parts: with the same ids, a part a server
  // stored before the step was aborted elsewhere is taken for a retry (LayerPusher).
  if (step != overlap_ids_.step || view_.membership_epoch() != overlap_ids_.membership_epoch) {
    overlap_ids_ = {step, view_.membership_epoch(), next_request_id_};
    next_request_id_ += LayerPusher::kIdsPerStep;
  }
  pusher_.Begin(routes_, header_, grad_.data(), weights_.data(), overlap_ids_.first, encoder_.get());
  absl::Time t = absl::Now();
  absl::Status computed =
      model_->ComputeGradient(batch_x_.data(), batch_y_.data(), count, absl::MakeSpan(grad_), stats, &pusher_);
  const absl::Time compute_end = absl::Now();
  // Calls already started must end before the pusher is used again, whatever happened.
  absl::Status answered = pusher_.Finish();
  RETURN_IF_ERROR(computed);
  const absl::Time now = absl::Now();
  times->set_compute_seconds(times->compute_seconds() +
                             absl::ToDoubleSeconds(compute_end - t - pusher_.send_time()));
  times->set_push_seconds(absl::ToDoubleSeconds(pusher_.send_time()));
  times->set_wait_seconds(absl::ToDoubleSeconds(now - compute_end));
  times->set_overlapped_seconds(absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), compute_end - pusher_.first_sent())));
  RETURN_IF_ERROR(answered);
  t = now;
  // The answers are in weights_ already, copied as they arrived.
  RETURN_IF_ERROR(model_->SetParameters(weights_));
  times->set_pull_seconds(absl::ToDoubleSeconds(absl::Now() - t));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Trainer::PullWeights(int64_t step, int epoch) {
  std::vector<PullRequest> requests(layout_.num_servers());
  for (int s = 0; s < layout_.num_servers(); ++s) {
    PullRequest& r = requests[s];
    r.set_shard(s);
    r.set_worker_rank(options_.rank);
    r.set_membership_epoch(view_.membership_epoch());
    r.set_step(step);
    r.set_data_epoch(epoch);
  }
  RETURN_IF_ERROR(ps_->PullShards(routes_, requests, &pulled_));
  RETURN_IF_ERROR(InstallWeights());
  int64_t lowest = pulled_[0].header.step();
  for (const IncomingPull& r : pulled_) lowest = std::min(lowest, r.header.step());
  return lowest;
}

absl::Status Trainer::InstallWeights() {
  for (int s = 0; s < layout_.num_servers(); ++s) {
    RETURN_IF_ERROR(layout_.ApplyPull(s, pulled_[s], weights_.data()));
    ReleaseValues(&pulled_[s]);
  }
  return model_->SetParameters(weights_);
}

absl::Status Trainer::Evaluate(int epoch) {
  while (true) {
    ASSIGN_OR_RETURN(LeaseResponse lease, scheduler_->LeaseEval(options_.rank, epoch));
    if (lease.epoch_done()) return absl::OkStatus();
    if (lease.wait()) {
      absl::SleepFor(kRetryPause);
      continue;
    }
    if (lease.begin() < 0 || lease.end() > test_->num_samples || lease.begin() >= lease.end()) {
      return absl::DataLossError(absl::StrCat("evaluation lease ", lease.lease_id(), " covers [",
                                              lease.begin(), ", ", lease.end(), "), outside the test set of ",
                                              test_->num_samples, " samples"));
    }
    model::BatchStats stats;
    RETURN_IF_ERROR(model_->Evaluate(test_->images.data() + lease.begin() * test_->features(),
                                     test_->labels.data() + lease.begin(),
                                     static_cast<int>(lease.end() - lease.begin()), &stats));
    EvalStats* eval = pending_.add_evals();
    eval->set_lease_id(lease.lease_id());
    eval->set_loss_sum(stats.loss_sum);
    eval->set_correct(stats.correct);
    eval->set_samples(stats.samples);
    // Reported before the next lease is asked for, so a lease is never held unreported for long.
    RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/true));
  }
}

absl::Status Trainer::EndEpoch(int epoch, bool last) {
  if (last || !options_.job.eval_last_epoch_only()) RETURN_IF_ERROR(Evaluate(epoch));
  if (last && options_.before_done) RETURN_IF_ERROR(options_.before_done(weights_));
  pending_.set_done(last);
  return MaybeReport(epoch, /*force=*/true);
}

absl::Status Trainer::Leave(int epoch) {
  LOG(INFO) << "worker " << options_.rank << ": leaving the job at step " << global_step_;
  // Statistics first: after Leave the scheduler no longer takes reports from this worker.
  RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/true));
  RETURN_IF_ERROR(scheduler_->Leave(WORKER, options_.rank, "asked to stop (SIGTERM)"));
  left_ = true;
  return absl::OkStatus();
}

absl::Status Trainer::MaybeReport(int epoch, bool force) {
  absl::Time now = absl::Now();
  if (!force && now - last_report_ < options_.report_interval) return absl::OkStatus();
  pending_.set_epoch(epoch);
  pending_.set_step(global_step_);
  RETURN_IF_ERROR(scheduler_->ReportProgress(pending_));
  pending_.Clear();
  pending_.set_worker_rank(options_.rank);
  last_report_ = now;
  return absl::OkStatus();
}

}  // namespace pstrain::worker
