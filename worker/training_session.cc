#include "worker/training_session.h"

#include <cmath>

#include <algorithm>
#include <numeric>
#include <utility>

#include <glog/logging.h>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/server_counts.h"
#include "common/status_macros.h"
#include "common/step_times.h"
#include "data/permutation.h"
#include "data/score_histogram_proto.h"

namespace pstrain::worker {
namespace {

std::vector<int64_t> TensorElements(const std::vector<model::ParamSpec>& params) {
  std::vector<int64_t> elements;
  for (const model::ParamSpec& p : params) elements.push_back(p.num_elements);
  return elements;
}

}  // namespace

std::string TrainingSession::LiveRanks(const ClusterView& view) {
  std::vector<int> ranks;
  for (const WorkerInfo& w : view.workers()) ranks.push_back(w.rank());
  return absl::StrJoin(ranks, ",");
}

absl::StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::Create(SessionOptions options,
                                                                         SchedulerApi* scheduler, PsApi* ps) {
  if (options.view.workers_size() < 1) return absl::InvalidArgumentError("cluster view lists no workers");
  if (options.job.mode() == SYNC && options.view.global_batch() < 1) {
    return absl::InvalidArgumentError("cluster view: global_batch is not set for a sync job");
  }
  if (options.clock == nullptr) return absl::InvalidArgumentError("session options: no clock");
  // Shards are the map's server ranks; with replicas a dead server's rank may be missing from the
  // view (and so from the client), its shard served by another server.
  const int num_shards = ServersOfMap(options.view.shard_map(),
                                      options.job.num_servers() > 0 ? options.job.num_servers() : ps->num_servers());
  ASSIGN_OR_RETURN(ShardLayout layout, ShardLayout::Create(options.view.shard_map(), num_shards, options.params));
  RETURN_IF_ERROR(ShardRoutes(options.view, num_shards).status());
  RETURN_IF_ERROR(ParseCompression(options.job.compression()).status());
  auto session =
      std::unique_ptr<TrainingSession>(new TrainingSession(std::move(options), scheduler, ps, std::move(layout)));
  ASSIGN_OR_RETURN(session->encoder_, NewEncoder(session->options_.job, session->view_.shard_map(), &session->layout_));
  return session;
}

absl::StatusOr<std::unique_ptr<PushEncoder>> TrainingSession::NewEncoder(const JobSpec& job, const ShardMap& map,
                                                                         const ShardLayout* layout) {
  ASSIGN_OR_RETURN(const Compression compression, ParseCompression(job.compression()));
  absl::flat_hash_set<int> averaged;  // sent as float32: see PushEncoder::Create
  for (const TensorSpec& t : map.tensors()) {
    if (t.averaged()) averaged.insert(t.id());
  }
  return PushEncoder::Create(compression, layout, std::move(averaged));
}

TrainingSession::TrainingSession(SessionOptions options, SchedulerApi* scheduler, PsApi* ps, ShardLayout layout)
    : options_(std::move(options)),
      scheduler_(scheduler),
      ps_(ps),
      layout_(std::move(layout)),
      overlap_(OverlapOn(options_.job)),
      view_(options_.view),
      weights_(model::TotalElements(options_.params)),
      grad_(weights_.size()),
      push_(layout_.num_servers()),
      pulled_(layout_.num_servers()),
      pusher_(&layout_, ps, TensorElements(options_.params)),
      // Request ids only need to differ between the pushes of one rank (ranks are never reused);
      // a random start also keeps ids of different jobs apart in logs.
      next_request_id_(absl::Uniform<uint64_t>(absl::BitGen()) | 1),
      last_checkpoint_ask_(options_.clock->Now()),
      staleness_(layout_.num_servers()) {
  pending_.set_worker_rank(options_.rank);
  metrics_ = options_.metrics;
  if (metrics_ == nullptr) {
    own_registry_ = std::make_unique<metrics::Registry>();
    own_metrics_ = std::make_unique<WorkerMetrics>(own_registry_.get(), layout_.num_servers());
    metrics_ = own_metrics_.get();
  }
  // Traffic before this session (another session of the same member) was reported by that one.
  reported_traffic_ = metrics_->traffic()->totals();
  if (options_.job.tables_size() > 0) {
    std::vector<int> dims;
    for (const TableSpec& t : options_.job.tables()) dims.push_back(t.dim());
    sparse_ = std::make_unique<SparseRowsCache>(std::move(dims), layout_.num_servers());
  }
}

absl::Status TrainingSession::Start() {
  LOG(INFO) << "worker " << options_.rank << " (live workers " << LiveRanks(view_) << "): training " << weights_.size()
            << " parameters on " << view_.train_samples() << " samples, mode " << Mode_Name(options_.job.mode());
  ASSIGN_OR_RETURN(routes_, ShardRoutes(view_, layout_.num_servers()));
  // A worker joining a running sync job starts where the servers are. (If it catches them
  // mid-step, some shards may be one step ahead; the first gradient then uses those slightly
  // newer weights.)
  ASSIGN_OR_RETURN(const int64_t step, PullWeightsWhenCurrent(/*step=*/0, /*epoch=*/0));
  if (Sync()) {
    global_step_ = step;
    if (global_step_ > 0) {
      LOG(INFO) << "starting at step " << global_step_ << ", where the servers are (a running or resumed job)";
    }
  }
  phase_ = global_step_ < view_.total_steps() || !Sync() || Streaming() ? Phase::kTrain : Phase::kDone;
  return absl::OkStatus();
}

absl::Status TrainingSession::Next(Work* work) {
  if (step_.active) {
    // The loop asks again without ending the step: it gave up on it.
    AbandonStep();
  }
  *work = Work();
  while (true) {
    switch (phase_) {
      case Phase::kStart:
        RETURN_IF_ERROR(Start());
        break;
      case Phase::kTrain: {
        ASSIGN_OR_RETURN(const bool got, Sync() ? NextSyncBatch(work) : NextLeasedBatch(work));
        if (got) return absl::OkStatus();
        break;  // the phase moved on
      }
      case Phase::kEvaluate: {
        ASSIGN_OR_RETURN(const bool got, NextEvaluation(work));
        if (got) return absl::OkStatus();
        break;
      }
      case Phase::kDone:
        metrics_->Idle();
        work->kind = Work::kDone;
        work->left = left_;
        return absl::OkStatus();
    }
  }
}

bool TrainingSession::InFileOrder() const {
  const std::string& format = options_.job.data().format();
  return format == "criteo" || format == "libsvm";
}

void TrainingSession::SetPermutation(int epoch) {
  if (epoch == perm_epoch_ || InFileOrder()) return;
  perm_ = data::EpochPermutation(options_.job.seed(), epoch, view_.train_samples());
  perm_epoch_ = epoch;
}

absl::Span<const int64_t> TrainingSession::SamplesOf(data::Range range) {
  if (!InFileOrder()) return absl::MakeConstSpan(perm_).subspan(range.begin, range.size());
  // Streamed text files are read in file order (records are lines; no random access), so a batch
  // is a contiguous run of records.
  in_order_.resize(range.size());
  std::iota(in_order_.begin(), in_order_.end(), range.begin);
  return in_order_;
}

absl::StatusOr<bool> TrainingSession::AwaitStreamStep() {
  bool said = false;
  while (global_step_ >= view_.total_steps()) {
    if (view_.stream().ended()) return false;
    if (LeaveRequested()) return false;
    if (!said) {
      LOG(INFO) << "step " << global_step_ << ": caught up with the data stream (" << view_.train_samples()
                << " records ready); waiting for the next file";
      said = true;
    }
    metrics_->Idle();
    RETURN_IF_ERROR(MaybeReport(epoch_, /*force=*/false));
    options_.clock->SleepFor(kStreamPause);
    RETURN_IF_ERROR(FollowStream());
  }
  return true;
}

absl::Status TrainingSession::FollowStream() {
  ASSIGN_OR_RETURN(const ClusterView latest, scheduler_->GetClusterView());
  if (latest.state() == FAILED) return absl::AbortedError(absl::StrCat("job failed: ", latest.failure()));
  if (latest.train_samples() >= view_.train_samples()) {
    view_.set_train_samples(latest.train_samples());
    view_.set_total_steps(latest.total_steps());
    *view_.mutable_stream() = latest.stream();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TrainingSession::NextSyncBatch(Work* work) {
  if (Streaming()) {
    ASSIGN_OR_RETURN(const bool ready, AwaitStreamStep());
    if (!ready) {
      if (LeaveRequested()) {
        RETURN_IF_ERROR(Leave(epoch_));
        return false;
      }
      // The stream ended, and its last step is applied.
      RETURN_IF_ERROR(MaybeReport(epoch_, /*force=*/true));
      StartEpochEnd(epoch_, /*last=*/true);
      return false;
    }
  }
  const int64_t n = view_.train_samples();
  const int64_t steps_per_epoch = data::SyncStepsPerEpoch(n, view_.global_batch());
  const int epoch = static_cast<int>(global_step_ / steps_per_epoch);
  SetPermutation(epoch);
  epoch_ = epoch;
  metrics_->SetEpoch(epoch);
  ASSIGN_OR_RETURN(const int slot, Slot());
  const data::Range slice =
      data::SyncSliceOfGlobalBatch(n, view_.global_batch(), view_.workers_size(), slot, global_step_ % steps_per_epoch);
  const double every = options_.job.checkpoint_every_seconds();
  ask_checkpoint_ = slot == 0 && every > 0 && Now() - last_checkpoint_ask_ >= absl::Seconds(every);
  work->kind = Work::kTrain;
  work->epoch = epoch;
  work->step = global_step_;
  work->samples = SamplesOf(slice);
  if (!step_.active && give_up_ == absl::InfiniteFuture()) give_up_ = Now() + options_.membership_timeout;
  step_ = Pending{true, false, global_step_, slice.size(), 0, 0, Now()};
  return true;
}

absl::StatusOr<bool> TrainingSession::NextLeasedBatch(Work* work) {
  const JobSpec& job = options_.job;
  SetPermutation(epoch_);
  while (!lease_.has_value() || lease_->next_batch >= lease_->batches) {
    lease_.reset();
    if (LeaveRequested()) {
      RETURN_IF_ERROR(Leave(epoch_));
      return false;
    }
    ASSIGN_OR_RETURN(LeaseResponse lease, scheduler_->LeaseWork(options_.rank, epoch_));
    if (lease.epoch_done() || lease.wait()) {
      // Idle: it holds nobody back (SSP) until its next push, and says so again when next idle.
      if (!finished_epoch_) {
        RETURN_IF_ERROR(FinishEpoch(epoch_));
        finished_epoch_ = true;
      }
      if (lease.wait() && Streaming()) {
        // Caught up with the stream: what it trained is reported at once (its files may close), and
        // it asks again once more records may be ready.
        if (!waiting_for_stream_) {
          LOG(INFO) << "caught up with the data stream (" << view_.train_samples() << " records ready); waiting for "
                    << (view_.stream().ended() ? "the leases still out" : "the next file");
          waiting_for_stream_ = true;
          RETURN_IF_ERROR(MaybeReport(epoch_, /*force=*/true));
        }
        metrics_->Idle();
        options_.clock->SleepFor(kStreamPause);
        continue;
      }
      if (lease.epoch_done()) {
        RETURN_IF_ERROR(scheduler_->Barrier(absl::StrCat("epoch-", epoch_, "-trained"), BarrierRequest::WORKERS, WORKER,
                                            options_.rank, options_.barrier_timeout));
        // Every push of the epoch is applied now; everyone evaluates the same weights.
        RETURN_IF_ERROR(PullWeightsWhenCurrent(/*step=*/0, epoch_).status());
        StartEpochEnd(epoch_, epoch_ == job.epochs() - 1);
        return false;
      }
      options_.clock->SleepFor(kRetryPause);  // Leases are out; one may come back if its holder dies.
      continue;
    }
    waiting_for_stream_ = false;
    const data::Range range{lease.begin(), lease.end()};
    // A stream's lease may be of records that became ready after the view this worker holds.
    if (Streaming() && range.end > view_.train_samples()) RETURN_IF_ERROR(FollowStream());
    const int64_t n = view_.train_samples();
    const int64_t batches =
        range.begin >= 0 && range.end <= n && range.begin < range.end ? data::NumBatches(range, job.batch_size()) : 0;
    if (batches == 0 || lease.first_batch() < 0 || lease.first_batch() >= batches) {
      return absl::DataLossError(absl::StrCat("lease ", lease.lease_id(), " covers [", range.begin, ", ", range.end,
                                              ") from batch ", lease.first_batch(), ", outside the epoch of ", n,
                                              " samples"));
    }
    lease_ = Lease{lease.lease_id(), range, batches, lease.first_batch(), lease.grant(), lease.granted_unix_ms()};
    finished_epoch_ = false;  // its pushes bring it back in (SSP)
  }
  const data::Range batch = data::BatchOf(lease_->range, job.batch_size(), lease_->next_batch);
  metrics_->SetEpoch(epoch_);
  work->kind = Work::kTrain;
  work->epoch = epoch_;
  work->step = clock_;
  work->samples = SamplesOf(batch);
  if (!step_.active && give_up_ == absl::InfiniteFuture()) give_up_ = Now() + options_.membership_timeout;
  step_ = Pending{
      true, false, clock_, batch.size(), lease_->id, lease_->next_batch, Now(), lease_->grant, lease_->granted_unix_ms};
  return true;
}

void TrainingSession::StartEpochEnd(int epoch, bool last) {
  metrics_->Idle();
  eval_epoch_ = epoch;
  eval_last_ = last;
  phase_ = Phase::kEvaluate;
}

absl::StatusOr<bool> TrainingSession::NextEvaluation(Work* work) {
  if (eval_last_ || !options_.job.eval_last_epoch_only()) {
    while (true) {
      ASSIGN_OR_RETURN(LeaseResponse lease, scheduler_->LeaseEval(options_.rank, eval_epoch_));
      if (lease.epoch_done()) break;
      if (lease.wait()) {
        options_.clock->SleepFor(kRetryPause);
        continue;
      }
      if (lease.begin() < 0 || lease.end() > view_.test_samples() || lease.begin() >= lease.end()) {
        return absl::DataLossError(absl::StrCat("evaluation lease ", lease.lease_id(), " covers [", lease.begin(), ", ",
                                                lease.end(), "), outside the test set of ", view_.test_samples(),
                                                " samples"));
      }
      eval_lease_id_ = lease.lease_id();
      work->kind = Work::kEvaluate;
      work->epoch = eval_epoch_;
      work->begin = lease.begin();
      work->end = lease.end();
      return true;
    }
  }
  RETURN_IF_ERROR(EndEpoch());
  return false;
}

absl::Status TrainingSession::ReportEvaluation(const model::BatchStats& stats, const data::ScoreHistogram* scores) {
  if (phase_ != Phase::kEvaluate || eval_lease_id_ == 0) {
    return absl::FailedPreconditionError("ReportEvaluation: no evaluation lease was handed out by Next()");
  }
  // Checked here, where the loop can still fix it; the scheduler would refuse the report and,
  // with it, the job's progress.
  if (scores != nullptr && scores->count() != stats.samples) {
    return absl::InvalidArgumentError(absl::StrCat("ReportEvaluation for lease ", eval_lease_id_, ": ", scores->count(),
                                                   " scores for ", stats.samples, " samples, expected one per sample"));
  }
  EvalStats* eval = pending_.add_evals();
  eval->set_lease_id(eval_lease_id_);
  eval->set_loss_sum(stats.loss_sum);
  eval->set_correct(stats.correct);
  eval->set_samples(stats.samples);
  eval->set_skipped_records(stats.skipped);
  if (scores != nullptr) *eval->mutable_scores() = data::ScoreHistogramToProto(*scores);
  eval_lease_id_ = 0;
  // Reported before the next lease is asked for, so a lease is never held unreported for long.
  return MaybeReport(eval_epoch_, /*force=*/true);
}

absl::Status TrainingSession::EndEpoch() {
  pending_.set_done(eval_last_);
  RETURN_IF_ERROR(MaybeReport(eval_epoch_, /*force=*/true));
  if (eval_last_) {
    phase_ = Phase::kDone;
    return absl::OkStatus();
  }
  phase_ = Phase::kTrain;
  if (!Sync()) {
    ++epoch_;
    clock_ = 0;
    finished_epoch_ = false;
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingSession::StepResult> TrainingSession::EndStep(const model::BatchStats& stats) {
  if (!step_.active || !step_.begun) {
    return absl::FailedPreconditionError("EndStep: no step was begun (BeginStep after a training step from Next())");
  }
  StepTimes times;
  if (!rows_refused_.ok()) {
    // The rows this gradient was computed on never came: the step is recomputed, nothing pushed.
    step_.active = false;
    RETURN_IF_ERROR(StepRefused(std::exchange(rows_refused_, absl::OkStatus())));
    return StepResult::kRecompute;
  }
  const absl::Status pushed = overlap_ ? FinishPushDuringBackward(&times) : PushAfterBackward(&times);
  step_.active = false;
  if (!pushed.ok()) {
    if (overlap_) {
      // The answers of the servers that took the step are in weights_: back to the step's own.
      std::copy(step_weights_.begin(), step_weights_.end(), weights_.begin());
      ++weights_version_;
    }
    RETURN_IF_ERROR(StepRefused(pushed));
    return StepResult::kRecompute;
  }
  // Counted only now: a refused step is recomputed, and its samples must count once.
  TrainStats* train = pending_.mutable_train();
  train->set_loss_sum(train->loss_sum() + stats.loss_sum);
  train->set_samples(train->samples() + step_.num_samples);
  train->set_steps(train->steps() + 1);
  AddTrainScores(stats);
  times.set_steps(1);
  AddStepTimes(times, pending_.mutable_step_times());
  metrics_->StepApplied(times, step_.num_samples, stats.loss_sum, Now());
  RETURN_IF_ERROR(StepApplied());
  return StepResult::kApplied;
}

absl::Status TrainingSession::StepApplied() {
  give_up_ = absl::InfiniteFuture();
  if (ask_checkpoint_) last_checkpoint_ask_ = Now();
  ask_checkpoint_ = false;
  ++global_step_;
  if (Sync()) {
    const int64_t steps_per_epoch = data::SyncStepsPerEpoch(view_.train_samples(), view_.global_batch());
    const int epoch = epoch_;
    if (LeaveRequested()) return Leave(epoch);
    // The epoch's last step is reported at once: the scheduler hands out the epoch's evaluation
    // leases only once every live worker has reported it.
    // A stream's one epoch ends with the stream (NextSyncBatch sees it when this view does not yet).
    const bool epoch_end = Streaming() ? view_.stream().ended() && global_step_ >= view_.total_steps()
                                       : global_step_ % steps_per_epoch == 0 || global_step_ == view_.total_steps();
    RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/epoch_end));
    if (epoch_end) {
      StartEpochEnd(epoch, epoch == options_.job.epochs() - 1 || global_step_ == view_.total_steps());
    }
    return absl::OkStatus();
  }
  ++clock_;
  ++lease_->next_batch;
  RecordLeaseProgress(lease_->id, lease_->next_batch);
  // A completed lease is reported at once: only complete leases count, and the epoch ends when
  // every lease is complete.
  return MaybeReport(epoch_, /*force=*/lease_->next_batch == lease_->batches);
}

absl::StatusOr<int> TrainingSession::Slot() const {
  for (int i = 0; i < view_.workers_size(); ++i) {
    if (view_.workers(i).rank() == options_.rank) return i;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("worker ", options_.rank, " is no longer a member of the job (membership epoch ",
                   view_.membership_epoch(), ", live workers ", LiveRanks(view_), "): it was declared dead"));
}

absl::Status TrainingSession::FinishEpoch(int epoch) {
  std::vector<FinishEpochRequest> finish(layout_.num_servers());
  for (int s = 0; s < layout_.num_servers(); ++s) {
    finish[s].set_worker_rank(options_.rank);
    finish[s].set_data_epoch(epoch);
    finish[s].set_shard(s);
  }
  const absl::Time give_up = Now() + options_.membership_timeout;
  for (absl::Status s = ps_->FinishEpochShards(routes_, finish); !s.ok(); s = ps_->FinishEpochShards(routes_, finish)) {
    if (!absl::IsAborted(s) && !(absl::IsUnavailable(s) && ServersRecover())) return s;
    RETURN_IF_ERROR(AwaitMembership(s, give_up));  // A server has not learnt of this worker yet.
  }
  return absl::OkStatus();
}

void TrainingSession::RecordLeaseProgress(int64_t lease_id, int64_t batches_done) {
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

absl::Status TrainingSession::Leave(int epoch) {
  LOG(INFO) << "worker " << options_.rank << ": leaving the job at step " << global_step_;
  // Statistics first: after Leave the scheduler no longer takes reports from this worker.
  RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/true));
  RETURN_IF_ERROR(scheduler_->Leave(WORKER, options_.rank, "asked to stop (SIGTERM)"));
  left_ = true;
  phase_ = Phase::kDone;
  return absl::OkStatus();
}

void TrainingSession::AddTrainScores(const model::BatchStats& stats) {
  // A stream's predictions also go to their files' scores, run by run.
  size_t run = 0;
  int64_t left_in_run = stats.prediction_files.empty() ? 0 : stats.prediction_files[0].second;
  for (size_t i = 0; i < stats.predictions.size() && i < stats.labels.size(); ++i) {
    FileScores* file = nullptr;
    if (run < stats.prediction_files.size()) {
      while (left_in_run == 0 && ++run < stats.prediction_files.size())
        left_in_run = stats.prediction_files[run].second;
      if (run < stats.prediction_files.size()) {
        file = &file_scores_[stats.prediction_files[run].first];
        --left_in_run;
      }
    }
    const float p = stats.predictions[i];
    if (std::isnan(p)) continue;  // a NaN loss is reported as such; no bin holds it
    const uint32_t bin = static_cast<uint32_t>(data::ScoreHistogram::BinOf(p));
    const bool click = stats.labels[i] != 0;
    auto& counts = train_bins_[bin];
    (click ? counts.first : counts.second) += 1;
    if (file != nullptr) {
      auto& file_counts = file->bins[bin];
      (click ? file_counts.first : file_counts.second) += 1;
      file->log_loss_sum += data::LogLoss(p, click);
    }
  }
}

void TrainingSession::BinsToProto(const std::map<uint32_t, std::pair<uint64_t, uint64_t>>& bins,
                                  pstrain::ScoreHistogram* out) {
  out->set_num_bins(data::ScoreHistogram::kNumBins);
  out->set_max_logit(data::ScoreHistogram::kMaxLogit);
  for (const auto& [bin, counts] : bins) {
    out->add_bins(bin);
    out->add_positives(counts.first);
    out->add_negatives(counts.second);
  }
}

absl::Status TrainingSession::MaybeReport(int epoch, bool force) {
  const absl::Time now = Now();
  if (!force && now - last_report_ < options_.report_interval) return absl::OkStatus();
  pending_.set_epoch(epoch);
  pending_.set_step(global_step_);
  // Deltas of the running totals, so the reports add up to the Prometheus counters exactly.
  const TrafficMeter::Totals traffic = metrics_->traffic()->totals();
  WorkerTraffic* delta = pending_.mutable_traffic();
  delta->set_bytes_sent(traffic.bytes_sent - reported_traffic_.bytes_sent);
  delta->set_bytes_received(traffic.bytes_received - reported_traffic_.bytes_received);
  delta->set_compression_saved_bytes(traffic.compression_saved_bytes - reported_traffic_.compression_saved_bytes);
  if (!train_bins_.empty()) BinsToProto(train_bins_, pending_.mutable_train()->mutable_scores());
  for (const auto& [index, scores] : file_scores_) {
    pstrain::FileScores* file = pending_.mutable_train()->add_files();
    file->set_file(index);
    BinsToProto(scores.bins, file->mutable_scores());
    file->set_log_loss_sum(scores.log_loss_sum);
  }
  RETURN_IF_ERROR(scheduler_->ReportProgress(pending_));
  train_bins_.clear();
  file_scores_.clear();
  reported_traffic_ = traffic;
  pending_.Clear();
  pending_.set_worker_rank(options_.rank);
  last_report_ = now;
  return absl::OkStatus();
}

}  // namespace pstrain::worker
