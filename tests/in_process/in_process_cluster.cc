#include "tests/in_process/in_process_cluster.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "data/assignment.h"
#include "scheduler/shard_map.h"
#include "server/applied_batches.h"

namespace pstrain::in_process {
namespace {

constexpr absl::Duration kHeartbeat = absl::Milliseconds(500);

std::vector<int> LiveWorkers(const ClusterView& view) {
  std::vector<int> ranks;
  for (const WorkerInfo& w : view.workers()) ranks.push_back(w.rank());
  return ranks;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Create(JobSpec job,
                                                                           std::vector<model::ParamSpec> params,
                                                                           int64_t train_samples, int64_t test_samples,
                                                                           const std::vector<std::string>& averaged) {
  ApplyJobDefaults(&job);
  RETURN_IF_ERROR(ValidateJobSpec(job));
  std::unique_ptr<InProcessCluster> cluster(new InProcessCluster(job, std::move(params)));
  scheduler::Scheduler::Options options;
  ASSIGN_OR_RETURN(options.shard_map, scheduler::BuildShardMap(scheduler::TensorSpecsOf(cluster->params_, averaged),
                                                               job.num_servers(), job.max_chunk_bytes()));
  options.job = job;
  options.train_samples = train_samples;
  options.test_samples = test_samples;
  options.total_steps =
      scheduler::TotalSteps(job, train_samples, data::SyncStepsPerEpoch(train_samples, job.global_batch()));
  options.heartbeat_interval = kHeartbeat;
  options.dead_after = absl::Seconds(3);
  SimulatedClock* clock = &cluster->scheduler_clock_;
  options.clock = [clock]() { return clock->Now(); };
  ASSIGN_OR_RETURN(cluster->core_, scheduler::Scheduler::Create(std::move(options)));
  cluster->scheduler_api_ = std::make_unique<InProcessScheduler>(cluster->core_.get());
  return cluster;
}

InProcessCluster::InProcessCluster(JobSpec job, std::vector<model::ParamSpec> params)
    : job_(std::move(job)), params_(std::move(params)) {}

InProcessCluster::~InProcessCluster() {
  // Parked calls end before the stores go.
  for (auto& store : stores_) store->Shutdown();
  ps_.reset();
}

absl::Status InProcessCluster::Start() {
  for (int s = 0; s < job_.num_servers(); ++s) {
    RETURN_IF_ERROR(scheduler_api_->Register(SERVER, absl::StrCat("in-process-server-", s), absl::Seconds(1)).status());
  }
  for (int w = 0; w < job_.num_workers(); ++w) {
    RETURN_IF_ERROR(scheduler_api_->Register(WORKER, "", absl::Seconds(1)).status());
  }
  ASSIGN_OR_RETURN(const ClusterView view, scheduler_api_->WaitUntilRunning(absl::Seconds(5)));
  std::vector<server::ParameterStore*> stores;
  for (int s = 0; s < job_.num_servers(); ++s) {
    server::ParameterStore::Options options;
    options.rank = s;
    options.job = job_;
    options.shard_map = view.shard_map();
    options.worker_ranks = LiveWorkers(view);
    options.num_workers = static_cast<int>(options.worker_ranks.size());
    options.membership_epoch = view.membership_epoch();
    options.total_steps = view.total_steps();
    ASSIGN_OR_RETURN(std::unique_ptr<server::ParameterStore> store, server::ParameterStore::Create(options));
    stores.push_back(store.get());
    stores_.push_back(std::move(store));
  }
  ps_ = std::make_unique<InProcessPs>(std::move(stores));
  scheduler_api_->set_after_call([this]() {
    if (follow_.load()) FollowMembership();
    ConfirmLeases();
  });
  HeartbeatAndAdvance(absl::ZeroDuration());
  return absl::OkStatus();
}

absl::StatusOr<int> InProcessCluster::AddWorker() {
  ASSIGN_OR_RETURN(const RegisterResponse registered, scheduler_api_->Register(WORKER, "", absl::Seconds(1)));
  return registered.rank();
}

void InProcessCluster::FollowMembership() {
  const ClusterView view = core_->View();
  for (auto& store : stores_) {
    if (store->membership_epoch() < view.membership_epoch()) {
      store->UpdateMembership(view.membership_epoch(), LiveWorkers(view)).IgnoreError();
    }
  }
}

void InProcessCluster::ConfirmLeases() {
  for (const auto& store : stores_) {
    HeartbeatRequest hb;
    hb.set_role(SERVER);
    hb.set_rank(store->rank());
    *hb.mutable_applied_leases() = store->AppliedLeasesFrom(1, server::kMaxReportedLeases);
    if (hb.applied_leases().lease_ids_size() > 0) core_->Heartbeat(hb).IgnoreError();
  }
}

void InProcessCluster::HeartbeatAndAdvance(absl::Duration d, const std::vector<int>& silent) {
  // In heartbeat-sized steps, so that no role that speaks looks silent for longer than one.
  absl::Duration left = d;
  do {
    const ClusterView view = core_->View();
    std::vector<std::pair<Role, int>> speaking;
    for (const ServerInfo& s : view.servers()) speaking.emplace_back(SERVER, s.rank());
    for (const WorkerInfo& w : view.workers()) {
      if (std::find(silent.begin(), silent.end(), w.rank()) == silent.end()) speaking.emplace_back(WORKER, w.rank());
    }
    for (const auto& [role, rank] : speaking) {
      HeartbeatRequest hb;
      hb.set_role(role);
      hb.set_rank(rank);
      if (role == SERVER && rank < static_cast<int>(stores_.size())) {
        *hb.mutable_applied_leases() = stores_[rank]->AppliedLeasesFrom(1, server::kMaxReportedLeases);
      }
      core_->Heartbeat(hb).IgnoreError();
    }
    const absl::Duration tick = std::min(left, kHeartbeat);
    scheduler_clock_.Advance(tick);
    left -= tick;
    core_->CheckHealth();
  } while (left > absl::ZeroDuration());
  if (follow_.load()) FollowMembership();
}

worker::SessionOptions InProcessCluster::SessionOptionsFor(int rank) const {
  worker::SessionOptions options;
  options.rank = rank;
  options.job = job_;
  options.view = core_->View();
  options.params = params_;
  options.clock = const_cast<SimulatedClock*>(&worker_clock_);
  options.report_interval = absl::ZeroDuration();
  return options;
}

absl::StatusOr<std::unique_ptr<worker::TrainingSession>> InProcessCluster::NewSession(int rank) {
  return worker::TrainingSession::Create(SessionOptionsFor(rank), scheduler_api_.get(), ps_.get());
}

std::vector<float> InProcessCluster::ServerWeights() const {
  std::vector<float> flat(model::TotalElements(params_));
  for (const auto& store : stores_) {
    for (const TensorChunk& chunk : store->Snapshot()) {
      const int64_t at = params_[chunk.tensor_id()].flat_offset + chunk.offset();
      std::memcpy(flat.data() + at, chunk.data().data(), chunk.data().size());
    }
  }
  return flat;
}

}  // namespace pstrain::in_process
