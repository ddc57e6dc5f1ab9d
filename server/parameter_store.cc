#include "server/parameter_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/checkpoint_chain.h"
#include "server/dense_shard.h"
#include "server/sparse_storage.h"

namespace pstrain::server {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian float32");

Mode EffectiveMode(Mode mode) { return mode == MODE_UNSPECIFIED ? SYNC : mode; }

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterStore>> ParameterStore::Create(const Options& options) {
  JobSpec job = options.job;
  ApplyJobDefaults(&job);
  RETURN_IF_ERROR(ValidateJobSpec(job));
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter store: num_workers is ", options.num_workers, ", expected >= 1"));
  }
  if (options.rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("parameter store: rank is ", options.rank, ", expected >= 0"));
  }
  std::vector<int> worker_ranks = options.worker_ranks;
  if (worker_ranks.empty()) {
    for (int r = 0; r < options.num_workers; ++r) worker_ranks.push_back(r);
  } else if (static_cast<int>(worker_ranks.size()) != options.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter store: ", worker_ranks.size(), " worker ranks for num_workers ", options.num_workers));
  }
  RETURN_IF_ERROR(CheckRanks("parameter store: worker ranks", &worker_ranks));

  DenseShard::Options shard_options;
  shard_options.rank = options.rank;
  shard_options.job = job;
  shard_options.shard_map = options.shard_map;
  shard_options.total_steps = options.total_steps;
  shard_options.initial_values = options.initial_values;
  ASSIGN_OR_RETURN(std::unique_ptr<DenseShard> dense, DenseShard::Create(shard_options));
  ASSIGN_OR_RETURN(std::unique_ptr<SparseStorage> rows, SparseStorage::Create(job, options.rank, job.num_servers()));

  Options effective = options;
  effective.job = std::move(job);
  LOG(INFO) << "server " << options.rank << ": " << dense->num_parts() << " chunks, " << dense->num_elements()
            << " floats; mode " << ModeName(EffectiveMode(effective.job.mode())) << ", " << options.num_workers
            << " workers [" << absl::StrJoin(worker_ranks, ", ") << "], membership epoch " << options.membership_epoch
            << (rows->num_tables() > 0 ? absl::StrCat("; ", rows->num_tables(), " embedding tables") : "");
  // The dense storage first: its parts are the store's parts (a partial push's chunk numbers).
  std::vector<std::unique_ptr<ShardStorage>> storages;
  storages.push_back(std::move(dense));
  storages.push_back(std::move(rows));
  return std::unique_ptr<ParameterStore>(new ParameterStore(effective, std::move(worker_ranks), std::move(storages)));
}

namespace {

int64_t NumValues(const std::vector<std::unique_ptr<ShardStorage>>& storages) {
  int64_t n = 0;
  for (const auto& s : storages) n += s->num_values();
  return n;
}

}  // namespace

ParameterStore::ParameterStore(const Options& options, std::vector<int> worker_ranks,
                               std::vector<std::unique_ptr<ShardStorage>> storages)
    : rank_(options.rank),
      mode_(EffectiveMode(options.job.mode())),
      allow_nonfinite_(options.job.allow_nonfinite_gradients()),
      max_samples_(mode_ == SYNC ? options.job.global_batch() : options.job.batch_size()),
      num_data_epochs_(options.job.epochs()),
      max_grad_norm_(options.job.max_grad_norm_per_sample()),
      output_mode_(OutputMode(options.job.output_mode())),
      storages_(std::move(storages)),
      num_values_(NumValues(storages_)),
      checkpoint_dir_(options.job.checkpoint_dir()),
      keep_checkpoints_(static_cast<size_t>(KeptCheckpoints(options.job))),
      checkpoint_every_(options.job.checkpoint_every_steps()),
      checkpoint_interval_(absl::Seconds(options.job.checkpoint_every_seconds())),
      on_checkpoint_written_(options.on_checkpoint_written),
      keep_from_(options.keep_from),
      metrics_(options.metrics),
      membership_epoch_(options.membership_epoch),
      shard_map_version_(options.shard_map.version()),
      sync_(rank_, max_samples_, &storages_),
      ssp_(options.job.staleness()),
      async_(rank_, mode_ == SSP),
      cadence_(options.job.full_checkpoint_every()) {
  absl::MutexLock lock(&mu_);
  for (int r : worker_ranks) workers_.emplace(r, LastPush());
  if (mode_ == SYNC) sync_.SetLive(worker_ranks);  // sorted by Create
  ssp_.SetLive(worker_ranks);                      // sorted by Create
  writes_checkpoints_ = options.write_checkpoints;
  last_snapshot_ = absl::Now();
  if (checkpoints_on()) initial_ = std::make_unique<const ShardCheckpoint>(CheckpointLocked());
}

ParameterStore::~ParameterStore() { Shutdown(); }

// ---------------------------------------------------------------------------------------------
// Validation that needs no lock.

absl::Status ParameterStore::ValidatePush(const DecodedPush& push, Parts* grads, Parts* reads) const {
  const PushRequest& req = push.header;
  CHECK_EQ(push.values.size(), static_cast<size_t>(req.chunks_size())) << "one value view per chunk";
  const int r = req.worker_rank();
  if (r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push from worker ", r, ": worker rank out of range, expected >= 0"));
  }
  const std::string what = absl::StrCat("push from worker ", r);
  // First: a push routed under another shard map carries another map's chunks, which is no error
  // of the push but a map it has not learnt yet (or this server has not).
  RETURN_IF_ERROR(CheckShardMap("push", r, req.shard_map_version()));
  if (req.num_samples() < 0 || req.num_samples() > max_samples_) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": num_samples is ", req.num_samples(), ", expected 0 to ",
                                                   max_samples_, " (the job's ",
                                                   mode_ == SYNC ? "global batch" : "batch size", ")"));
  }
  if (req.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": step is ", req.step(), ", expected >= 0"));
  }
  RETURN_IF_ERROR(CheckDataEpoch(what, req.data_epoch()));
  if (req.lease_id() < 0 || req.lease_batch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": batch ", req.lease_batch(), " of lease ", req.lease_id(), ", expected both >= 0"));
  }
  if (req.lease_granted_unix_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": lease_granted_unix_ms is ", req.lease_granted_unix_ms(), ", expected >= 0 (0: none)"));
  }
  if (req.partial() && mode_ != SYNC) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a partial push (a part of the step's gradient) is ",
                                                   "for SYNC mode only; this job is ", Mode_Name(mode_)));
  }
  // With the gradient-norm guard on, its sums of squares also tell whether every value is finite
  // (GradientNorm): the storages skip their own pass, and only a push they show non-finite is
  // checked again, for the message naming the first bad value.
  const bool guard_checks_finite = max_grad_norm_ > 0 && !allow_nonfinite_;
  for (const auto& storage : storages_) {
    ASSIGN_OR_RETURN(std::unique_ptr<StoragePart> part,
                     storage->CheckGradient(what, push, allow_nonfinite_ || guard_checks_finite));
    grads->push_back(std::move(part));
  }
  const std::string read_what = absl::StrCat(what, " (pull_sparse)");
  const ReadAsk ask = AskOf(req, push.pull_keys);
  for (const auto& storage : storages_) {
    ASSIGN_OR_RETURN(std::unique_ptr<StoragePart> part, storage->CheckRead(read_what, ask));
    reads->push_back(std::move(part));
  }
  return CheckGradientNorm(what, push, *grads);
}

absl::Status ParameterStore::CheckGradientNorm(absl::string_view what, const DecodedPush& push,
                                               const Parts& grads) const {
  if (max_grad_norm_ <= 0) return absl::OkStatus();
  const PushRequest& req = push.header;
  // A push carries the mean gradient of its samples, so its norm is at most the largest
  // per-sample norm. This store sees only its part of the push, whose norm is at most the whole
  // one's: above the limit here proves the whole is above it too.
  GradientNorm squares;
  for (size_t i = 0; i < storages_.size(); ++i) storages_[i]->AddSquares(*grads[i], &squares);
  if (!allow_nonfinite_ && !std::isfinite(squares.sum_of_squares + squares.uncounted_squares)) {
    for (const auto& storage : storages_) RETURN_IF_ERROR(storage->CheckGradient(what, push, false).status());
    return absl::InvalidArgumentError(absl::StrCat(what, ": a value is not finite, expected finite values"));
  }
  const double norm = std::sqrt(squares.sum_of_squares);
  VLOG(2) << what << " for step " << req.step() << ": gradient norm " << norm << " over server " << rank_ << "'s part ("
          << req.num_samples() << " samples)";
  if (norm <= max_grad_norm_) return absl::OkStatus();
  if (metrics_.refused_grad_norm != nullptr) metrics_.refused_grad_norm->Increment();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " for step ", req.step(), ": gradient norm ", norm, " over server ", rank_, "'s part (", req.num_samples(),
      " samples; largest part ", squares.largest_name, ", norm ", std::sqrt(squares.largest),
      ") exceeds max_grad_norm_per_sample = ", max_grad_norm_, "; nothing applied"));
}

absl::Status ParameterStore::CheckDataEpoch(absl::string_view what, int32_t data_epoch) const {
  // An epoch past the job's was never handed out; entering it would leave the server deaf to every
  // push of the real epochs.
  if (data_epoch < 0 || data_epoch >= num_data_epochs_) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": data_epoch is ", data_epoch, ", expected 0 to ",
                                                   num_data_epochs_ - 1, " (the job has ", num_data_epochs_,
                                                   " epochs)"));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::ValidatePull(const DecodedPull& pull, Parts* reads) const {
  const PullRequest& req = pull.header;
  const int r = req.worker_rank();
  if (r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull from worker ", r, ": worker rank out of range, expected >= 0"));
  }
  if (req.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull from worker ", r, ": step is ", req.step(), ", expected >= 0"));
  }
  const std::string what = absl::StrCat("pull from worker ", r);
  RETURN_IF_ERROR(CheckShardMap("pull", r, req.shard_map_version()));  // its keys are another map's
  RETURN_IF_ERROR(CheckDataEpoch(what, req.data_epoch()));
  // PullRequest.rows_only: no dense chunks, i.e. none of the parts.
  const ReadAsk ask{0, req.rows_only() ? 0 : -1, pull.keys};
  for (const auto& storage : storages_) {
    ASSIGN_OR_RETURN(std::unique_ptr<StoragePart> part, storage->CheckRead(what, ask));
    reads->push_back(std::move(part));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// The three calls.

void ParameterStore::Pull(const PullRequest& req, PullResponse* resp, Done done) {
  const InMemoryPull pull(req);
  Pull(pull.decoded(), PullAnswer{resp}, std::move(done));
}

void ParameterStore::Pull(const DecodedPull& pull, PullAnswer answer, Done done) {
  const PullRequest& req = pull.header;
  PullAsk ask;
  ask.rows_out = answer.rows;
  absl::Status status = ValidatePull(pull, &ask.reads);
  Completions out;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = CheckLive("pull", req.worker_rank(), req.membership_epoch(), req.shard_map_version());
    if (status.ok() && mode_ == SSP) {
      status = EnterDataEpochLocked("pull", req.worker_rank(), req.data_epoch(), &out);
    }
    if (status.ok()) {
      VLOG(2) << "server " << rank_ << ": pull from worker " << req.worker_rank() << " for step " << req.step();
      PullLocked(req.worker_rank(), req.step(), req.data_epoch(), answer.resp, answer.values, std::move(done), &out,
                 /*push_resp=*/nullptr, std::move(ask));
    }
  }
  // `done` was moved only where the status stayed OK.
  // NOLINTNEXTLINE(bugprone-use-after-move)
  if (!status.ok()) out.push_back({std::move(done), std::move(status)});
  Run(&out);
}

void ParameterStore::Push(const PushRequest& req, PushResponse* resp, Done done) {
  const InMemoryPush push(req);
  Push(push.decoded(), resp, std::move(done));
}

void ParameterStore::Push(const DecodedPush& push, PushResponse* resp, Done done) {
  const PushRequest& req = push.header;
  Parts grads;
  Parts reads;  // checked, then unused: Push answers with no values
  absl::Status status = ValidatePush(push, &grads, &reads);
  Completions out;
  bool handed_on = false;  // `done` went to PullLocked, which answers it
  std::optional<ShardCheckpoint> due;
  int64_t rollbacks = 0;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = CheckLive("push", req.worker_rank(), req.membership_epoch(), req.shard_map_version());
    if (status.ok()) status = PushLocked(req, &grads, &out);
    if (status.ok() && mode_ == SYNC && req.wait_until_applied()) {
      // A backup's copy of the step: answered once applied, so the worker moves on only then.
      handed_on = true;
      PullLocked(req.worker_rank(), req.step() + 1, req.data_epoch(), nullptr, nullptr, std::move(done), &out, resp,
                 PullAsk());
    } else if (status.ok()) {
      resp->set_step(step_);
    }
    due.swap(due_checkpoint_);
    rollbacks = rollbacks_.load();
  }
  // NOLINTNEXTLINE(bugprone-use-after-move): moved only where handed_on is set
  if (!handed_on) out.push_back({std::move(done), std::move(status)});
  Run(&out);
  if (due) WriteCheckpointFile(*due, rollbacks);
}

void ParameterStore::PushPull(const PushRequest& req, PullResponse* resp, Done done) {
  const InMemoryPush push(req);
  PushPull(push.decoded(), PullAnswer{resp}, std::move(done));
}

void ParameterStore::PushPull(const DecodedPush& push, PullAnswer answer, Done done) {
  const PushRequest& req = push.header;
  Parts grads;
  PullAsk ask;
  ask.first_part = AskOf(req, push.pull_keys).first_part;
  ask.rows_out = answer.rows;
  absl::Status status = ValidatePush(push, &grads, &ask.reads);
  Completions out;
  std::optional<ShardCheckpoint> due;
  int64_t rollbacks = 0;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = CheckLive("push", req.worker_rank(), req.membership_epoch(), req.shard_map_version());
    if (status.ok()) status = PushLocked(req, &grads, &out);
    if (status.ok()) {
      PullLocked(req.worker_rank(), req.step() + 1, req.data_epoch(), answer.resp, answer.values, std::move(done), &out,
                 /*push_resp=*/nullptr, std::move(ask));
    }
    due.swap(due_checkpoint_);
    rollbacks = rollbacks_.load();
  }
  // `done` was moved only where the status stayed OK.
  // NOLINTNEXTLINE(bugprone-use-after-move)
  if (!status.ok()) out.push_back({std::move(done), std::move(status)});
  Run(&out);
  if (due) WriteCheckpointFile(*due, rollbacks);
}

absl::Status ParameterStore::FinishEpoch(const FinishEpochRequest& req) {
  const int r = req.worker_rank();
  if (r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("finish epoch from worker ", r, ": worker rank out of range, expected >= 0"));
  }
  RETURN_IF_ERROR(CheckDataEpoch(absl::StrCat("finish epoch from worker ", r), req.data_epoch()));
  Completions out;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError(absl::StrCat("server ", rank_, " shutting down"));
    auto worker = workers_.find(r);
    if (worker == workers_.end()) return NotLiveError("finish epoch", r);
    if (mode_ != SSP || req.data_epoch() < async_.data_epoch()) return absl::OkStatus();
    status = EnterDataEpochLocked("finish epoch", r, req.data_epoch(), &out);
    if (status.ok()) {
      ssp_.Finish(r);
      VLOG(1) << "server " << rank_ << ": worker " << r << " finished data epoch " << async_.data_epoch();
      ReleaseReadyLocked(&out);
    }
  }
  Run(&out);
  return status;
}

void ParameterStore::Shutdown() {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) LOG(INFO) << "server " << rank_ << ": parameter store shutting down";
    shutting_down_ = true;
    for (Waiter& w : waiters_) {
      out.push_back({std::move(w.done), absl::UnavailableError(absl::StrCat("server ", rank_, " shutting down"))});
    }
    waiters_.clear();
  }
  Run(&out);
}

void ParameterStore::Retire() {
  Shutdown();
  absl::MutexLock write_lock(&write_mu_);
  absl::MutexLock lock(&mu_);
  rollbacks_.fetch_add(1);  // A write of a snapshot taken before sees the change and is skipped.
}

void ParameterStore::EnableCheckpoints() {
  absl::MutexLock lock(&mu_);
  writes_checkpoints_ = true;
}

absl::Status ParameterStore::CheckpointAt(int64_t step) {
  const std::string what = absl::StrCat("server ", rank_, ": the quiet cut of step ", step);
  std::optional<ShardCheckpoint> due;
  int64_t rollbacks = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError(absl::StrCat(what, ": the store is shut down"));
    if (quiet_cut_ == step) return absl::OkStatus();
    if (checkpoint_dir_.empty() || !writes_checkpoints_) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": this store writes no checkpoints (",
                                                        checkpoint_dir_.empty() ? "no folder" : "a copy", ")"));
    }
    if (step_ > step) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": the store is at step ", step_, " already"));
    }
    step_ = step;
    MaybeSnapshotLocked(/*asked=*/true);
    due.swap(due_checkpoint_);
    rollbacks = rollbacks_.load();
  }
  if (!due.has_value()) return absl::InternalError(absl::StrCat(what, ": no snapshot was taken"));
  if (!WriteCheckpointFile(*due, rollbacks)) {
    return absl::InternalError(absl::StrCat(what, ": the write failed (the server's log says why)"));
  }
  absl::MutexLock lock(&mu_);
  quiet_cut_ = step;
  return absl::OkStatus();
}

int64_t ParameterStore::step() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

AppliedLeases ParameterStore::AppliedLeasesFrom(int64_t first_lease_id, int max_leases) const {
  absl::MutexLock lock(&mu_);
  return async_.AppliedFrom(first_lease_id, max_leases);
}

void ParameterStore::SettleLeasesBelow(int64_t lease_id) {
  absl::MutexLock lock(&mu_);
  async_.SettleLeasesBelow(lease_id);
}

size_t ParameterStore::num_unsettled_leases() const {
  absl::MutexLock lock(&mu_);
  return async_.num_unsettled_leases();
}

void ParameterStore::SetOnLeaseBatchApplied(std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  on_lease_batch_applied_ = std::move(callback);
}

int ParameterStore::num_parked() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiters_.size());
}

std::optional<ParameterStore::PendingStep> ParameterStore::Pending(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  if (mode_ != SYNC) return std::nullopt;
  return sync_.Pending(step_, now);
}

std::vector<TensorChunk> ParameterStore::Snapshot() const {
  std::vector<TensorChunk> out;
  absl::MutexLock lock(&mu_);
  for (const auto& storage : storages_) storage->AppendSnapshot(&out);
  return out;
}

std::vector<TableStats> ParameterStore::TableStats() const {
  std::vector<server::TableStats> out;
  absl::MutexLock lock(&mu_);
  for (const auto& storage : storages_) storage->AppendTableStats(&out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Checkpoints.

absl::StatusOr<ShardCheckpoint> ParameterStore::Checkpoint() const {
  absl::MutexLock lock(&mu_);
  return CheckpointLocked();
}

absl::StatusOr<ParameterStore::PreparedParts> ParameterStore::PrepareCheckpoint(const ShardCheckpoint& ckpt) const {
  const std::string what = absl::StrCat("restoring server ", rank_, " from a checkpoint of step ", ckpt.step);
  if (ckpt.rank != rank_) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the checkpoint is server ", ckpt.rank, "'s"));
  }
  if (ckpt.step < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative step"));
  if (ckpt.base_step >= 0) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": it is a delta on step ", ckpt.base_step,
                                                      "; read it with its chain (ReadCheckpointChain)"));
  }
  PreparedParts prepared;
  for (const auto& storage : storages_) {
    ASSIGN_OR_RETURN(std::unique_ptr<PreparedRestore> part, storage->PrepareRestore(what, ckpt));
    prepared.push_back(std::move(part));
  }
  return prepared;
}

absl::Status ParameterStore::Restore(const ShardCheckpoint& ckpt) {
  ASSIGN_OR_RETURN(PreparedParts prepared, PrepareCheckpoint(ckpt));
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError(absl::StrCat("server ", rank_, " shutting down"));
    if (mode_ == SYNC && sync_.num_pushed() > 0) {
      return absl::FailedPreconditionError(absl::StrCat("restoring server ", rank_, " to step ", ckpt.step, ": ",
                                                        sync_.num_pushed(), " of ", workers_.size(),
                                                        " workers already pushed step ", step_));
    }
    InstallCheckpointLocked(ckpt, std::move(prepared));
    ReleaseReadyLocked(&out);
  }
  LOG(INFO) << "server " << rank_ << ": restored step " << ckpt.step << " from a checkpoint";
  Run(&out);
  return absl::OkStatus();
}

void ParameterStore::InstallCheckpointLocked(const ShardCheckpoint& ckpt, PreparedParts prepared) {
  for (size_t i = 0; i < storages_.size(); ++i) {
    storages_[i]->Install(ckpt, std::move(prepared[i]));
    storages_[i]->AfterCheckpointCut();
  }
  cadence_.Restored();
  step_ = ckpt.step;
  for (auto& [r, last] : workers_) last = LastPush();
}

bool ParameterStore::WriteCheckpointFile(const ShardCheckpoint& ckpt, int64_t rollbacks) {
  {
    absl::MutexLock lock(&write_mu_);
    if (rollbacks != rollbacks_.load()) {
      LOG(INFO) << "server " << rank_ << ": checkpoint of step " << ckpt.step
                << " not written: the store was rolled back since";
      return false;
    }
    if (!WriteAndPruneLocked(ckpt, keep_checkpoints_)) return false;
    cadence_.Written(ckpt.step);
  }
  if (on_checkpoint_written_) on_checkpoint_written_(ckpt.step);
  return true;
}

bool ParameterStore::WriteAndPruneLocked(const ShardCheckpoint& ckpt, size_t keep) {
  const std::string path = CheckpointPath(checkpoint_dir_, rank_, ckpt.step);
  const absl::Time start = absl::Now();
  std::error_code ignored;  // a folder that cannot be made fails the write below, which says why
  std::filesystem::create_directories(checkpoint_dir_, ignored);
  const absl::Status status = WriteCheckpoint(path, ckpt, output_mode_);
  if (!status.ok()) {
    LOG(ERROR) << "server " << rank_ << ": checkpoint of step " << ckpt.step << " to '" << path
               << "' failed: " << status;
    return false;
  }
  const absl::Time written = absl::Now();
  LOG(INFO) << "server " << rank_ << ": wrote checkpoint '" << path << "' (step " << ckpt.step
            << (ckpt.base_step >= 0 ? absl::StrCat(", a delta on step ", ckpt.base_step) : std::string()) << ", "
            << CheckpointFileSize(ckpt) << " bytes, " << absl::ToInt64Milliseconds(written - start) << " ms)";
  if (metrics_.checkpoint_duration != nullptr) {
    metrics_.checkpoint_duration->Observe(absl::ToDoubleSeconds(written - start));
  }
  if (metrics_.checkpoints_written != nullptr) metrics_.checkpoints_written->Increment();
  if (metrics_.last_checkpoint_time != nullptr) metrics_.last_checkpoint_time->Set(absl::ToUnixMicros(written) / 1e6);
  // The newest `keep` steps stay restorable: their chains' files stay; so does every step the
  // scheduler may still ask for.
  PruneCheckpoints(checkpoint_dir_, rank_, keep,
                   keep_from_ != nullptr ? keep_from_->load() : std::numeric_limits<int64_t>::max());
  return true;
}

void ParameterStore::Run(Completions* completions) {
  // First chunk first: a step's parts go back first layer first, the order the next forward pass
  // needs them in (partial pushes arrive last layer first).
  std::stable_sort(completions->begin(), completions->end(),
                   [](const Completion& a, const Completion& b) { return a.order < b.order; });
  for (Completion& c : *completions) c.done(std::move(c.status));
}

}  // namespace pstrain::server
