// TrainingSession (worker/training_session.h): waiting out membership changes. A refused step,
// a server that stopped answering, a rollback to a checkpoint: the session learns the new view
// from the scheduler, follows it, and says whether the step is to be computed again.
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/server_counts.h"
#include "common/status_macros.h"
#include "worker/training_session.h"

namespace pstrain::worker {

absl::Status TrainingSession::StepRefused(const absl::Status& status) {
  ask_checkpoint_ = false;
  // ABORTED: the membership changed (or a server has not learnt the newest epoch yet).
  // UNAVAILABLE: a server is down. SYNC: with checkpoints the scheduler waits for a replacement;
  // ASYNC/SSP: a membership change only when its shard's copy is promoted (replicas) or a
  // replacement restores its checkpoint.
  // A rollback this worker learnt of elsewhere (a rows pull between steps waited out the new view)
  // and has not applied yet: the servers are back at the restored step, so a request for a later
  // step is FAILED_PRECONDITION ("server 0 is at step 200"). The rewind below is the answer.
  const bool behind_rewind = absl::IsFailedPrecondition(status) && Sync() && rewind_to_.has_value();
  const bool membership =
      absl::IsAborted(status) || (absl::IsUnavailable(status) && (Sync() || ServersRecover())) || behind_rewind;
  if (!membership) return status;
  metrics_->traffic()->Retried(status.code());
  if (!behind_rewind) RETURN_IF_ERROR(AwaitMembership(status, give_up_));
  if (!Sync()) rewind_to_.reset();  // a rollback to a common step exists only in SYNC
  if (rewind_to_.has_value()) {
    // The servers rolled back to a checkpoint: go back to its step and its data position.
    LOG(INFO) << "rewinding from step " << global_step_ << " to step " << *rewind_to_
              << ", where the servers restored their checkpoints";
    global_step_ = *rewind_to_;
    rewind_to_.reset();
    give_up_ = absl::InfiniteFuture();
    encoder_->Reset();
    RETURN_IF_ERROR(PullWeightsWhenCurrent(global_step_, epoch_).status());
  }
  // Otherwise the same batch (SYNC: the same global batch under the new view) is handed out again.
  return absl::OkStatus();
}

absl::StatusOr<ClusterView> TrainingSession::FetchView(absl::Time give_up) {
  ASSIGN_OR_RETURN(ClusterView view, scheduler_->GetClusterView());
  // A dead server's rank waits for a replacement (no replicas): until one registers, a retry would
  // only recompute the step and push it again to the servers that already have it.
  auto map_servers = [this](const ClusterView& v) {
    return ServersOfMap(v.shard_map(),
                        options_.job.num_servers() > 0 ? options_.job.num_servers() : layout_.num_servers());
  };
  while (view.state() == RUNNING && view.shard_hosts_size() == 0 && view.servers_size() < map_servers(view)) {
    if (Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat("step ", global_step_, ": ", view.servers_size(), " of ",
                                                      map_servers(view), " servers live for ",
                                                      absl::FormatDuration(options_.membership_timeout)));
    }
    options_.clock->SleepFor(kRetryPause);
    ASSIGN_OR_RETURN(view, scheduler_->GetClusterView());
  }
  if (view.state() == FAILED) return absl::AbortedError(absl::StrCat("job failed: ", view.failure()));
  return view;
}

absl::Status TrainingSession::AwaitMembership(const absl::Status& aborted, absl::Time give_up) {
  if (Now() > give_up) {
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
    const absl::Time patience_end = Now() + kUnavailablePatience;
    while (view.membership_epoch() <= view_.membership_epoch() && Now() < patience_end) {
      options_.clock->SleepFor(kRetryPause);
      ASSIGN_OR_RETURN(view, FetchView(give_up));
    }
  }
  if (view.membership_epoch() > view_.membership_epoch()) {
    LOG(INFO) << "step " << global_step_ << ": membership epoch " << view_.membership_epoch() << " -> "
              << view.membership_epoch() << ", live workers " << LiveRanks(view);
    // ASYNC/SSP: the only restore step a view carries is the quiet cut of a change of the server
    // count, after which nobody redoes anything.
    if (Sync() && view.has_restore_step() && view.restore_epoch() > view_.restore_epoch() &&
        view.restore_step() < global_step_) {
      rewind_to_ = view.restore_step();
    }
    if (view.shard_map().version() != view_.shard_map().version()) RETURN_IF_ERROR(FollowShardMap(view));
    ASSIGN_OR_RETURN(routes_, ShardRoutes(view, layout_.num_servers()));
    ps_->UpdateServers(view);
    view_ = std::move(view);
  } else {
    VLOG(1) << "step " << global_step_ << ": " << aborted.message() << "; retrying";
    options_.clock->SleepFor(kRetryPause);
  }
  return absl::OkStatus();
}

absl::Status TrainingSession::FollowShardMap(const ClusterView& view) {
  const int num_shards = ServersOfMap(view.shard_map(), options_.job.num_servers());
  ASSIGN_OR_RETURN(ShardLayout layout, ShardLayout::Create(view.shard_map(), num_shards, options_.params));
  RETURN_IF_ERROR(ShardRoutes(view, num_shards).status());
  // Built for layout_'s address, which the assignment below keeps.
  ASSIGN_OR_RETURN(std::unique_ptr<PushEncoder> encoder, NewEncoder(options_.job, view.shard_map(), &layout_));
  LOG(INFO) << "step " << global_step_ << ": shard map version " << view_.shard_map().version() << " -> "
            << view.shard_map().version() << ", " << layout_.num_servers() << " -> " << num_shards << " servers";
  layout_ = std::move(layout);
  encoder_ = std::move(encoder);
  push_ = std::vector<OutgoingPush>(num_shards);
  pulled_ = std::vector<IncomingPull>(num_shards);
  staleness_ = PullStaleness(num_shards);
  // The batch's keys stay: a rows pull waiting out this change pulls them again from their new
  // owners.
  if (sparse_ != nullptr) sparse_->SetShards(num_shards);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TrainingSession::PullWeightsWhenCurrent(int64_t step, int epoch) {
  const absl::Time give_up = Now() + options_.membership_timeout;
  while (true) {
    absl::StatusOr<int64_t> pulled = PullWeights(step, epoch);
    if (!absl::IsAborted(pulled.status()) && !absl::IsUnavailable(pulled.status())) return pulled;
    RETURN_IF_ERROR(AwaitMembership(pulled.status(), give_up));
  }
}

}  // namespace pstrain::worker
