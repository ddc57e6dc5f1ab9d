#include "server/parameter_store.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/chunk_codec.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/init.h"
#include "server/float_ops.h"
#include "server/model_convert.h"

namespace pstrain::server {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian float32");

Mode EffectiveMode(Mode mode) { return mode == MODE_UNSPECIFIED ? SYNC : mode; }

// The values of a request that carries them in its chunks' data.
std::vector<PayloadView> DataOf(const PushRequest& req) {
  std::vector<PayloadView> views;
  views.reserve(req.chunks_size());
  for (const TensorChunk& c : req.chunks()) views.emplace_back(c.data());
  return views;
}

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
    return absl::InvalidArgumentError(
        absl::StrCat("parameter store: rank is ", options.rank, ", expected >= 0"));
  }
  std::vector<int> worker_ranks = options.worker_ranks;
  if (worker_ranks.empty()) {
    for (int r = 0; r < options.num_workers; ++r) worker_ranks.push_back(r);
  } else if (static_cast<int>(worker_ranks.size()) != options.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("parameter store: ", worker_ranks.size(),
                                                   " worker ranks for num_workers ", options.num_workers));
  }
  RETURN_IF_ERROR(CheckRanks("parameter store: worker ranks", &worker_ranks));

  const ShardMap& map = options.shard_map;
  std::vector<model::ParamSpec> specs;
  std::vector<std::string> names;
  for (int i = 0; i < map.tensors_size(); ++i) {
    const TensorSpec& t = map.tensors(i);
    if (t.id() != i) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map: tensor at index ", i, " has id ", t.id(), ", expected ", i));
    }
    ASSIGN_OR_RETURN(model::ParamSpec spec, ParamSpecFromProto(t));
    specs.push_back(std::move(spec));
    names.push_back(t.name());
  }

  std::vector<Chunk> chunks;
  for (int i = 0; i < map.chunks_size(); ++i) {
    const ChunkSpec& c = map.chunks(i);
    if (c.tensor_id() < 0 || c.tensor_id() >= map.tensors_size()) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: chunk ", i, " names tensor id ",
                                                     c.tensor_id(), ", the model has ",
                                                     map.tensors_size(), " tensors"));
    }
    const int64_t n = specs[c.tensor_id()].num_elements;
    if (c.offset() < 0 || c.length() <= 0 || c.offset() + c.length() > n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard map: chunk ", i, " of tensor '", names[c.tensor_id()], "' covers [", c.offset(), ", ",
          c.offset() + c.length(), "), expected a non-empty range within [0, ", n, ")"));
    }
    if (c.server_rank() == options.rank) {
      chunks.push_back({c.tensor_id(), c.offset(), c.length(), 0, map.tensors(c.tensor_id()).averaged()});
    }
  }
  std::sort(chunks.begin(), chunks.end(), [](const Chunk& a, const Chunk& b) {
    return std::make_pair(a.tensor_id, a.offset) < std::make_pair(b.tensor_id, b.offset);
  });
  int64_t total = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0 && chunks[i].tensor_id == chunks[i - 1].tensor_id &&
        chunks[i - 1].offset + chunks[i - 1].length > chunks[i].offset) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: server ", options.rank,
                                                     "'s chunks of tensor '", names[chunks[i].tensor_id],
                                                     "' at offsets ", chunks[i - 1].offset, " and ",
                                                     chunks[i].offset, " overlap"));
    }
    chunks[i].base = total;
    total += chunks[i].length;
  }

  if (options.initial_values != nullptr) {
    const int64_t size = static_cast<int64_t>(options.initial_values->size());
    int64_t model_elements = 0;
    for (const model::ParamSpec& spec : specs) {
      model_elements += spec.num_elements;
      if (spec.flat_offset < 0 || spec.flat_offset + spec.num_elements > size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter store: tensor '", spec.name, "' covers [", spec.flat_offset, ", ",
            spec.flat_offset + spec.num_elements, ") of the flat model, but there are ", size, " initial values"));
      }
    }
    if (size != model_elements) {
      return absl::InvalidArgumentError(absl::StrCat("parameter store: ", size, " initial values for a model of ",
                                                     model_elements, " elements (", specs.size(), " tensors)"));
    }
  }
  // Values depend on (seed, tensor id, element index) only, so any split gives the same model.
  // Declared values (initial_values) are one flat vector, also the same for any split.
  std::vector<float> weights(total);
  std::vector<std::unique_ptr<model::Optimizer>> optimizers;
  const model::OptimizerOptions optimizer_options = OptimizerOptionsFromProto(job.optimizer());
  // Averaged tensors (TensorSpec.averaged): w -= 1 * g, whatever the job's optimizer, so that the
  // workers' pushes of (pulled - local) make the weighted mean of their values (ApplyGradientLocked
  // gives these chunks lr 1 at every step).
  model::OptimizerOptions averaging_options;
  averaging_options.type = model::OptimizerOptions::Type::kSgd;
  averaging_options.lr = 1.0f;
  averaging_options.weight_decay = 0.0f;
  for (const Chunk& c : chunks) {
    if (options.initial_values != nullptr) {
      std::memcpy(weights.data() + c.base,
                  options.initial_values->data() + specs[c.tensor_id].flat_offset + c.offset,
                  sizeof(float) * c.length);
    } else {
      model::FillInitialValues(job.seed(), c.tensor_id, specs[c.tensor_id], c.offset, c.length,
                               weights.data() + c.base);
    }
    ASSIGN_OR_RETURN(std::unique_ptr<model::Optimizer> optimizer,
                     model::Optimizer::Create(c.averaged ? averaging_options : optimizer_options, c.length));
    optimizers.push_back(std::move(optimizer));
  }

  // The state-vector count depends only on the job's optimizer type; a server with no chunk still
  // records it, so its checkpoints match those of any other server of the job. (Averaged chunks
  // have no state: their part of the checkpoint's state vectors is zeros.)
  ASSIGN_OR_RETURN(std::unique_ptr<model::Optimizer> probe, model::Optimizer::Create(optimizer_options, 0));

  Options effective = options;
  effective.job = std::move(job);
  LOG(INFO) << "server " << options.rank << ": " << chunks.size() << " chunks, " << total
            << " floats; mode " << ModeName(EffectiveMode(effective.job.mode())) << ", "
            << options.num_workers << " workers [" << absl::StrJoin(worker_ranks, ", ")
            << "], membership epoch " << options.membership_epoch;
  return std::unique_ptr<ParameterStore>(new ParameterStore(
      effective, std::move(worker_ranks), std::move(chunks), std::move(names), std::move(weights),
      std::move(optimizers), probe->num_state_vectors(), LayoutFingerprint(map, options.rank)));
}

ParameterStore::ParameterStore(const Options& options, std::vector<int> worker_ranks, std::vector<Chunk> chunks,
                               std::vector<std::string> names, std::vector<float> weights,
                               std::vector<std::unique_ptr<model::Optimizer>> optimizers,
                               int num_state_vectors, uint64_t layout_fingerprint)
    : rank_(options.rank),
      mode_(EffectiveMode(options.job.mode())),
      staleness_(options.job.staleness()),
      allow_nonfinite_(options.job.allow_nonfinite_gradients()),
      total_steps_(options.total_steps),
      base_lr_(options.job.optimizer().lr()),
      schedule_(LrScheduleFromProto(options.job.optimizer().schedule())),
      chunks_(std::move(chunks)),
      tensor_names_(std::move(names)),
      total_elements_(static_cast<int64_t>(weights.size())),
      num_state_vectors_(num_state_vectors),
      layout_fingerprint_(layout_fingerprint),
      checkpoint_dir_(options.job.checkpoint_dir()),
      checkpoint_every_(options.job.checkpoint_every_steps()),
      checkpoint_interval_(absl::Seconds(options.job.checkpoint_every_seconds())),
      on_checkpoint_written_(options.on_checkpoint_written),
      weights_(std::move(weights)),
      optimizers_(std::move(optimizers)),
      membership_epoch_(options.membership_epoch),
      sum_(total_elements_) {
  absl::MutexLock lock(&mu_);
  for (int r : worker_ranks) workers_.emplace(r, NewWorkerLocked());
  writes_checkpoints_ = options.write_checkpoints;
  last_snapshot_ = absl::Now();
  if (checkpoints_on()) initial_ = std::make_unique<const ShardCheckpoint>(CheckpointLocked());
}

ParameterStore::~ParameterStore() { Shutdown(); }

// ---------------------------------------------------------------------------------------------
// Validation that needs no lock.

absl::Status ParameterStore::ValidatePush(const PushRequest& req, absl::Span<const PayloadView> values) const {
  CHECK_EQ(values.size(), static_cast<size_t>(req.chunks_size())) << "one value view per chunk";
  const int r = req.worker_rank();
  if (r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push from worker ", r, ": worker rank out of range, expected >= 0"));
  }
  const std::string what = absl::StrCat("push from worker ", r);
  if (req.num_samples() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": num_samples is ", req.num_samples(), ", expected >= 0"));
  }
  if (req.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": step is ", req.step(), ", expected >= 0"));
  }
  if (req.data_epoch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": data_epoch is ", req.data_epoch(), ", expected >= 0"));
  }
  if (req.lease_id() < 0 || req.lease_batch() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": batch ", req.lease_batch(), " of lease ",
                                                   req.lease_id(), ", expected both >= 0"));
  }
  // A whole push holds every chunk of the shard; a partial one a contiguous run of them.
  const int num_chunks = static_cast<int>(chunks_.size());
  const int first = req.partial() ? req.first_chunk() : 0;
  if (req.partial()) {
    if (mode_ != SYNC) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": a partial push (a part of the step's gradient) is ",
                                                     "for SYNC mode only; this job is ", Mode_Name(mode_)));
    }
    if (first < 0 || req.chunks_size() < 1 || req.chunks_size() > num_chunks - first) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": partial push of ", req.chunks_size(),
                                                     " chunks from chunk ", first, ", expected 1 or more of the ",
                                                     num_chunks, " chunks server ", rank_, " owns"));
    }
  } else if (req.chunks_size() != num_chunks) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": got ", req.chunks_size(), " chunks, expected ",
                                                   chunks_.size(), " (the chunks server ", rank_, " owns)"));
  }
  for (int i = 0; i < req.chunks_size(); ++i) {
    const TensorChunk& got = req.chunks(i);
    const Chunk& want = chunks_[first + i];
    if (got.tensor_id() < 0 || got.tensor_id() >= static_cast<int>(tensor_names_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": unknown tensor id ", got.tensor_id(),
                                                     " (the model has ", tensor_names_.size(), " tensors)"));
    }
    const std::string& name = tensor_names_[want.tensor_id];
    if (got.tensor_id() != want.tensor_id || got.offset() != want.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": chunk ", first + i, " is tensor '", tensor_names_[got.tensor_id()], "' at offset ", got.offset(),
          ", expected tensor '", name, "' at offset ", want.offset, " (server ", rank_,
          "'s chunks in shard-map order)"));
    }
    if (got.length() != want.length) {
      return absl::InvalidArgumentError(absl::StrCat(what, " for tensor '", name, "' chunk at offset ",
                                                     want.offset, ": got ", got.length(),
                                                     " floats, expected ", want.length));
    }
    const PayloadView& data = values[i];
    if (absl::Status shape = CheckChunkShape(got.encoding(), data, want.length); !shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " for tensor '", name, "' chunk at offset ", want.offset,
                                                     ": ", shape.message()));
    }
    if (!allow_nonfinite_) {
      float value = 0;
      const int64_t bad = FindNonFiniteValue(got.encoding(), data, want.length, &value);
      if (bad >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(what, " for tensor '", name, "': element ",
                                                       want.offset + bad, " is ", NonFiniteName(value)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::ValidatePull(const PullRequest& req) const {
  const int r = req.worker_rank();
  if (r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull from worker ", r, ": worker rank out of range, expected >= 0"));
  }
  if (req.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull from worker ", r, ": step is ", req.step(), ", expected >= 0"));
  }
  if (req.data_epoch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull from worker ", r, ": data_epoch is ", req.data_epoch(), ", expected >= 0"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// The three calls.

void ParameterStore::Pull(const PullRequest& req, PullResponse* resp, Done done, float* values) {
  absl::Status status = ValidatePull(req);
  Completions out;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = CheckLive("pull", req.worker_rank(), req.membership_epoch());
    if (status.ok() && mode_ == SSP) {
      status = EnterDataEpochLocked("pull", req.worker_rank(), req.data_epoch(), &out);
    }
    if (status.ok()) {
      VLOG(2) << "server " << rank_ << ": pull from worker " << req.worker_rank() << " for step " << req.step();
      PullLocked(req.worker_rank(), req.step(), req.data_epoch(), resp, values, std::move(done), &out);
    }
  }
  if (!status.ok()) out.push_back({std::move(done), std::move(status)});
  Run(&out);
}

void ParameterStore::Push(const PushRequest& req, PushResponse* resp, Done done) {
  Push(req, DataOf(req), resp, std::move(done));
}

void ParameterStore::Push(const PushRequest& req, absl::Span<const PayloadView> values, PushResponse* resp,
                          Done done) {
  absl::Status status = ValidatePush(req, values);
  Completions out;
  bool handed_on = false;  // `done` went to PullLocked, which answers it
  std::optional<ShardCheckpoint> due;
  int64_t rollbacks = 0;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = CheckLive("push", req.worker_rank(), req.membership_epoch());
    if (status.ok()) status = PushLocked(req, values, &out);
    if (status.ok() && mode_ == SYNC && req.wait_until_applied()) {
      // A backup's copy of the step: answered once applied, so the worker moves on only then.
      handed_on = true;
      PullLocked(req.worker_rank(), req.step() + 1, req.data_epoch(), nullptr, nullptr, std::move(done), &out, resp);
    } else if (status.ok()) {
      resp->set_step(step_);
    }
    due.swap(due_checkpoint_);
    rollbacks = rollbacks_.load();
  }
  if (!handed_on) out.push_back({std::move(done), std::move(status)});
  Run(&out);
  if (due) WriteCheckpointFile(*due, rollbacks);
}

void ParameterStore::PushPull(const PushRequest& req, PullResponse* resp, Done done) {
  PushPull(req, DataOf(req), resp, std::move(done));
}

void ParameterStore::PushPull(const PushRequest& req, absl::Span<const PayloadView> values, PullResponse* resp,
                              Done done, float* answer_values) {
  absl::Status status = ValidatePush(req, values);
  Completions out;
  std::optional<ShardCheckpoint> due;
  int64_t rollbacks = 0;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = CheckLive("push", req.worker_rank(), req.membership_epoch());
    if (status.ok()) status = PushLocked(req, values, &out);
    if (status.ok()) {
      PullLocked(req.worker_rank(), req.step() + 1, req.data_epoch(), resp, answer_values, std::move(done), &out,
                 /*push_resp=*/nullptr, RangeOf(req));
    }
    due.swap(due_checkpoint_);
    rollbacks = rollbacks_.load();
  }
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
  if (req.data_epoch() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("finish epoch from worker ", r, ": data_epoch is ",
                                                   req.data_epoch(), ", expected >= 0"));
  }
  Completions out;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError(absl::StrCat("server ", rank_, " shutting down"));
    auto worker = workers_.find(r);
    if (worker == workers_.end()) return NotLiveError("finish epoch", r);
    if (mode_ != SSP || req.data_epoch() < data_epoch_) return absl::OkStatus();
    status = EnterDataEpochLocked("finish epoch", r, req.data_epoch(), &out);
    if (status.ok()) {
      worker->second.finished = true;
      VLOG(1) << "server " << rank_ << ": worker " << r << " finished data epoch " << data_epoch_;
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

void ParameterStore::EnableCheckpoints() {
  absl::MutexLock lock(&mu_);
  writes_checkpoints_ = true;
}

int64_t ParameterStore::step() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

std::optional<ParameterStore::PendingStep> ParameterStore::Pending(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  if (mode_ != SYNC || num_pushed_ == 0) return std::nullopt;
  PendingStep pending;
  pending.step = step_;
  pending.waited = now - first_push_at_;
  pending.typical = typical_wait_;
  for (const auto& [r, w] : workers_) {
    if (!w.pushed) pending.missing.push_back(r);
  }
  return pending;
}

std::vector<TensorChunk> ParameterStore::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<TensorChunk> out(chunks_.size());
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    out[i].set_tensor_id(c.tensor_id);
    out[i].set_offset(c.offset);
    out[i].set_length(c.length);
    out[i].set_data(reinterpret_cast<const char*>(weights_.data() + c.base), 4 * c.length);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Checkpoints.

absl::StatusOr<ShardCheckpoint> ParameterStore::Checkpoint() const {
  absl::MutexLock lock(&mu_);
  return CheckpointLocked();
}

absl::Status ParameterStore::ValidateCheckpoint(const ShardCheckpoint& ckpt) const {
  const std::string what = absl::StrCat("restoring server ", rank_, " from a checkpoint of step ", ckpt.step);
  if (ckpt.rank != rank_) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the checkpoint is server ", ckpt.rank, "'s"));
  }
  if (ckpt.step < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative step"));
  if (ckpt.chunks.size() != chunks_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": it has ", ckpt.chunks.size(),
                                                      " chunks, this server owns ", chunks_.size()));
  }
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const ChunkSpec& got = ckpt.chunks[i];
    const Chunk& want = chunks_[i];
    if (got.tensor_id() != want.tensor_id || got.offset() != want.offset || got.length() != want.length) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": chunk ", i, " is tensor ", got.tensor_id(), " [", got.offset(), ", ",
          got.offset() + got.length(), "), expected tensor '", tensor_names_[want.tensor_id], "' [",
          want.offset, ", ", want.offset + want.length, ")"));
    }
  }
  if (ckpt.layout_fingerprint != layout_fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": layout fingerprint ", ckpt.layout_fingerprint,
                                                      ", this server's is ", layout_fingerprint_,
                                                      " (the model's tensors differ)"));
  }
  if (ckpt.num_state_vectors != num_state_vectors_) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", ckpt.num_state_vectors,
                                                      " optimizer state vectors, this server's optimizer has ",
                                                      num_state_vectors_));
  }
  if (static_cast<int64_t>(ckpt.weights.size()) != total_elements_) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", ckpt.weights.size(), " weights, expected ",
                                                   total_elements_));
  }
  if (static_cast<int>(ckpt.state.size()) != num_state_vectors_) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", ckpt.state.size(), " state vectors, expected ",
                                                   num_state_vectors_));
  }
  for (size_t s = 0; s < ckpt.state.size(); ++s) {
    if (static_cast<int64_t>(ckpt.state[s].size()) != total_elements_) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": state vector ", s, " has ", ckpt.state[s].size(),
                                                     " floats, expected ", total_elements_));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::Restore(const ShardCheckpoint& ckpt) {
  RETURN_IF_ERROR(ValidateCheckpoint(ckpt));
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError(absl::StrCat("server ", rank_, " shutting down"));
    if (mode_ == SYNC && num_pushed_ > 0) {
      return absl::FailedPreconditionError(absl::StrCat("restoring server ", rank_, " to step ", ckpt.step, ": ",
                                                        num_pushed_, " of ", workers_.size(),
                                                        " workers already pushed step ", step_));
    }
    InstallCheckpointLocked(ckpt);
    ReleaseReadyLocked(&out);
  }
  LOG(INFO) << "server " << rank_ << ": restored step " << ckpt.step << " from a checkpoint";
  Run(&out);
  return absl::OkStatus();
}

void ParameterStore::InstallCheckpointLocked(const ShardCheckpoint& ckpt) {
  std::copy(ckpt.weights.begin(), ckpt.weights.end(), weights_.begin());
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    // An averaged chunk's optimizer has no state (its part of the vectors is zeros).
    for (int s = 0; s < optimizers_[i]->num_state_vectors(); ++s) {
      const float* src = ckpt.state[s].data() + c.base;
      std::copy(src, src + c.length, optimizers_[i]->state_vector(s).begin());
    }
  }
  step_ = ckpt.step;
  for (auto& [r, worker] : workers_) worker.has_last_push = false;
}

void ParameterStore::WriteCheckpointFile(const ShardCheckpoint& ckpt, int64_t rollbacks) {
  constexpr size_t kKeep = 2;
  {
    absl::MutexLock lock(&write_mu_);
    if (rollbacks != rollbacks_.load()) {
      LOG(INFO) << "server " << rank_ << ": checkpoint of step " << ckpt.step
                << " not written: the store was rolled back since";
      return;
    }
    if (!WriteAndPruneLocked(ckpt, kKeep)) return;
  }
  if (on_checkpoint_written_) on_checkpoint_written_(ckpt.step);
}

bool ParameterStore::WriteAndPruneLocked(const ShardCheckpoint& ckpt, size_t keep) {
  const std::string path = CheckpointPath(checkpoint_dir_, rank_, ckpt.step);
  const absl::Time start = absl::Now();
  std::error_code ignored;  // a folder that cannot be made fails the write below, which says why
  std::filesystem::create_directories(checkpoint_dir_, ignored);
  const absl::Status status = WriteCheckpoint(path, ckpt);
  if (!status.ok()) {
    LOG(ERROR) << "server " << rank_ << ": checkpoint of step " << ckpt.step << " to '" << path
               << "' failed: " << status;
    return false;
  }
  LOG(INFO) << "server " << rank_ << ": wrote checkpoint '" << path << "' (step " << ckpt.step << ", "
            << CheckpointFileSize(ckpt) << " bytes, " << absl::ToInt64Milliseconds(absl::Now() - start)
            << " ms)";
  const std::vector<int64_t> steps = ListCheckpointSteps(checkpoint_dir_, rank_);
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    const std::string old = CheckpointPath(checkpoint_dir_, rank_, steps[i]);
    std::error_code ec;
    if (!std::filesystem::remove(old, ec) && ec) {
      LOG(WARNING) << "server " << rank_ << ": cannot remove old checkpoint '" << old << "': " << ec.message();
    }
  }
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
