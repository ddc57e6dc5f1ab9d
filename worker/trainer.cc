#include "worker/trainer.h"

#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/assignment.h"
#include "data/batch.h"
#include "data/permutation.h"

namespace pstrain::worker {

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(TrainerOptions options,
                                                        SchedulerClient* scheduler, PsClient* ps,
                                                        model::Mlp* model, const data::Dataset* train,
                                                        const data::Dataset* test) {
  if (train->features() != model->input_size() || test->features() != model->input_size()) {
    return absl::InvalidArgumentError(absl::StrCat("data has ", train->features(),
                                                   " features per sample, the model expects ",
                                                   model->input_size()));
  }
  if (options.view.workers_size() < 1) return absl::InvalidArgumentError("cluster view lists no workers");
  ASSIGN_OR_RETURN(ShardLayout layout,
                   ShardLayout::Create(options.view.shard_map(), ps->num_servers(), model->params()));
  return std::unique_ptr<Trainer>(
      new Trainer(std::move(options), scheduler, ps, model, train, test, std::move(layout)));
}

Trainer::Trainer(TrainerOptions options, SchedulerClient* scheduler, PsClient* ps, model::Mlp* model,
                 const data::Dataset* train, const data::Dataset* test, ShardLayout layout)
    : options_(std::move(options)),
      num_workers_(options_.view.workers_size()),
      scheduler_(scheduler),
      ps_(ps),
      model_(model),
      train_(train),
      test_(test),
      layout_(std::move(layout)),
      weights_(model->num_parameters()),
      grad_(model->num_parameters()),
      push_(ps->num_servers()),
      pulled_(ps->num_servers()),
      // Request ids are unique per worker rank: the rank in the top bits, a counter below.
      next_request_id_(static_cast<uint64_t>(options_.rank) << 40) {
  const int batch = options_.job.batch_size();
  batch_x_.resize(static_cast<size_t>(batch) * train_->features());
  batch_y_.resize(batch);
  pending_.set_worker_rank(options_.rank);
}

absl::Status Trainer::Run() {
  LOG(INFO) << "worker " << options_.rank << " of " << num_workers_ << ": training "
            << model_->num_parameters() << " parameters on " << train_->num_samples << " samples, mode "
            << Mode_Name(options_.job.mode());
  if (options_.job.mode() == SYNC) return RunSync();
  return RunLeased();
}

absl::Status Trainer::RunSync() {
  const JobSpec& job = options_.job;
  const int64_t n = train_->num_samples;
  const int64_t steps_per_epoch = data::SyncStepsPerEpoch(n, job.batch_size(), num_workers_);
  const int64_t total_steps = options_.view.total_steps();
  RETURN_IF_ERROR(PullWeights(/*step=*/0, /*epoch=*/0));
  for (int epoch = 0; epoch < job.epochs() && global_step_ < total_steps; ++epoch) {
    std::vector<int64_t> perm = data::EpochPermutation(job.seed(), epoch, n);
    for (int64_t s = 0; s < steps_per_epoch && global_step_ < total_steps; ++s) {
      data::Range slice = data::SyncSlice(n, job.batch_size(), num_workers_, options_.rank, s);
      RETURN_IF_ERROR(Step(perm, slice, global_step_, epoch));
      ++global_step_;
      RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/false));
    }
    const bool last = epoch == job.epochs() - 1 || global_step_ >= total_steps;
    RETURN_IF_ERROR(EndEpoch(epoch, last));
  }
  return absl::OkStatus();
}

absl::Status Trainer::RunLeased() {
  const JobSpec& job = options_.job;
  const int64_t n = train_->num_samples;
  RETURN_IF_ERROR(PullWeights(/*step=*/0, /*epoch=*/0));
  for (int epoch = 0; epoch < job.epochs(); ++epoch) {
    std::vector<int64_t> perm = data::EpochPermutation(job.seed(), epoch, n);
    int64_t clock = 0;  // Pushes this epoch: the SSP clock.
    while (true) {
      ASSIGN_OR_RETURN(LeaseResponse lease, scheduler_->LeaseWork(options_.rank, epoch));
      if (lease.epoch_done()) break;
      data::Range range{lease.begin(), lease.end()};
      if (range.begin < 0 || range.end > n || range.begin >= range.end) {
        return absl::DataLossError(absl::StrCat("lease ", lease.lease_id(), " covers [", range.begin, ", ",
                                                range.end, "), outside the epoch of ", n, " samples"));
      }
      const int64_t batches = data::NumBatches(range, job.batch_size());
      for (int64_t b = 0; b < batches; ++b) {
        RETURN_IF_ERROR(Step(perm, data::BatchOf(range, job.batch_size(), b), clock, epoch));
        ++clock;
        ++global_step_;
        RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/false));
      }
    }
    FinishEpochRequest finish;
    finish.set_worker_rank(options_.rank);
    finish.set_data_epoch(epoch);
    RETURN_IF_ERROR(ps_->FinishEpochAll(finish));
    RETURN_IF_ERROR(scheduler_->Barrier(absl::StrCat("epoch-", epoch, "-trained"), BarrierRequest::WORKERS,
                                        WORKER, options_.rank, options_.barrier_timeout));
    // Every push of the epoch is applied now; everyone evaluates the same weights.
    RETURN_IF_ERROR(PullWeights(/*step=*/0, epoch));
    RETURN_IF_ERROR(EndEpoch(epoch, epoch == job.epochs() - 1));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Step(const std::vector<int64_t>& perm, data::Range range, int64_t step, int epoch) {
  const int count = static_cast<int>(range.size());
  data::GatherRange(*train_, perm, range, batch_x_.data(), batch_y_.data());
  model::BatchStats stats;
  RETURN_IF_ERROR(model_->ComputeGradient(batch_x_.data(), batch_y_.data(), count,
                                          absl::MakeSpan(grad_), &stats));
  TrainStats* train = pending_.mutable_train();
  train->set_loss_sum(train->loss_sum() + stats.loss_sum);
  train->set_samples(train->samples() + count);
  train->set_steps(train->steps() + 1);

  const uint64_t request_id = next_request_id_++;
  for (int s = 0; s < ps_->num_servers(); ++s) {
    PushRequest& push = push_[s];
    push.set_worker_rank(options_.rank);
    push.set_membership_epoch(options_.view.membership_epoch());
    push.set_step(step);
    push.set_data_epoch(epoch);
    push.set_num_samples(count);
    push.set_request_id(request_id);
    layout_.FillPush(s, grad_.data(), &push);
  }
  RETURN_IF_ERROR(ps_->PushPullAll(push_, &pulled_));
  return InstallWeights();
}

absl::Status Trainer::PullWeights(int64_t step, int epoch) {
  std::vector<PullRequest> requests(ps_->num_servers());
  for (PullRequest& r : requests) {
    r.set_worker_rank(options_.rank);
    r.set_membership_epoch(options_.view.membership_epoch());
    r.set_step(step);
    r.set_data_epoch(epoch);
  }
  RETURN_IF_ERROR(ps_->PullAll(requests, &pulled_));
  return InstallWeights();
}

absl::Status Trainer::InstallWeights() {
  for (int s = 0; s < ps_->num_servers(); ++s) {
    RETURN_IF_ERROR(layout_.ApplyPull(s, pulled_[s], weights_.data()));
  }
  return model_->SetParameters(weights_);
}

absl::Status Trainer::EndEpoch(int epoch, bool last) {
  EvalStats* eval = pending_.mutable_eval();
  if (last || !options_.job.eval_last_epoch_only()) {
    data::Range slice = data::EvenSlice(test_->num_samples, num_workers_, options_.rank);
    model::BatchStats stats;
    if (slice.size() > 0) {
      RETURN_IF_ERROR(model_->Evaluate(test_->images.data() + slice.begin * test_->features(),
                                       test_->labels.data() + slice.begin, static_cast<int>(slice.size()),
                                       &stats));
    }
    eval->set_loss_sum(stats.loss_sum);
    eval->set_correct(stats.correct);
    eval->set_samples(stats.samples);
  }
  pending_.set_done(last);
  RETURN_IF_ERROR(MaybeReport(epoch, /*force=*/true));
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
