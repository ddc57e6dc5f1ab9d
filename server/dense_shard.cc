#include "server/dense_shard.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chunk_codec.h"
#include "common/status_macros.h"
#include "model/init.h"
#include "server/float_ops.h"
#include "server/model_convert.h"

namespace pstrain::server {
namespace {

// A push's chunks, checked: views into the received bytes, valid during the store's call.
struct DenseGradient : StoragePart {
  DenseGradient(const PushRequest& r, absl::Span<const PayloadView> v) : req(&r), values(v) {}
  const PushRequest* req;
  absl::Span<const PayloadView> values;
};

// The chunks an answer carries.
struct DenseRead : StoragePart {
  DenseRead(int f, int n) : first(f), count(n) {}
  int first;
  int count;  // < 0: all
};

// A worker's SYNC gradient in the local layout.
struct DenseSlot : GradientSlot {
  explicit DenseSlot(int64_t n) : grad(static_cast<size_t>(n), 0.0f) {}
  std::vector<float> grad;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DenseShard>> DenseShard::Create(const Options& options) {
  const JobSpec& job = options.job;
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
      return absl::InvalidArgumentError(absl::StrCat("shard map: chunk ", i, " names tensor id ", c.tensor_id(),
                                                     ", the model has ", map.tensors_size(), " tensors"));
    }
    const int64_t n = specs[c.tensor_id()].num_elements;
    if (c.offset() < 0 || c.length() <= 0 || c.offset() + c.length() > n) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: chunk ", i, " of tensor '", names[c.tensor_id()],
                                                     "' covers [", c.offset(), ", ", c.offset() + c.length(),
                                                     "), expected a non-empty range within [0, ", n, ")"));
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
      return absl::InvalidArgumentError(absl::StrCat("shard map: server ", options.rank, "'s chunks of tensor '",
                                                     names[chunks[i].tensor_id], "' at offsets ", chunks[i - 1].offset,
                                                     " and ", chunks[i].offset, " overlap"));
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
        return absl::InvalidArgumentError(absl::StrCat("parameter store: tensor '", spec.name, "' covers [",
                                                       spec.flat_offset, ", ", spec.flat_offset + spec.num_elements,
                                                       ") of the flat model, but there are ", size, " initial values"));
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
  // workers' pushes of (pulled - local) make the weighted mean of their values (Apply gives these
  // chunks lr 1 at every step).
  model::OptimizerOptions averaging_options;
  averaging_options.type = model::OptimizerOptions::Type::kSgd;
  averaging_options.lr = 1.0f;
  averaging_options.weight_decay = 0.0f;
  for (const Chunk& c : chunks) {
    if (options.initial_values != nullptr) {
      std::memcpy(weights.data() + c.base, options.initial_values->data() + specs[c.tensor_id].flat_offset + c.offset,
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
  return std::unique_ptr<DenseShard>(new DenseShard(options, std::move(chunks), std::move(names), std::move(weights),
                                                    std::move(optimizers), probe->num_state_vectors(),
                                                    LayoutFingerprint(map, options.rank)));
}

DenseShard::DenseShard(const Options& options, std::vector<Chunk> chunks, std::vector<std::string> names,
                       std::vector<float> weights, std::vector<std::unique_ptr<model::Optimizer>> optimizers,
                       int num_state_vectors, uint64_t layout_fingerprint)
    : rank_(options.rank),
      base_lr_(options.job.optimizer().lr()),
      schedule_(LrScheduleFromProto(options.job.optimizer().schedule())),
      total_steps_(options.total_steps),
      chunks_(std::move(chunks)),
      tensor_names_(std::move(names)),
      num_state_vectors_(num_state_vectors),
      layout_fingerprint_(layout_fingerprint),
      weights_(std::move(weights)),
      optimizers_(std::move(optimizers)),
      sum_(weights_.size()) {}

std::string DenseShard::PartName(int i) const {
  return absl::StrCat("tensor '", tensor_names_[chunks_[i].tensor_id], "' at offset ", chunks_[i].offset);
}

absl::Status DenseShard::ValidateGradient(absl::string_view what, const PushRequest& req,
                                          absl::Span<const PayloadView> values, bool allow_nonfinite) const {
  // A whole push holds every chunk of the shard; a partial one a contiguous run of them.
  const int num_chunks = static_cast<int>(chunks_.size());
  const int first = req.partial() ? req.first_chunk() : 0;
  if (req.partial()) {
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
      return absl::InvalidArgumentError(absl::StrCat(what, ": unknown tensor id ", got.tensor_id(), " (the model has ",
                                                     tensor_names_.size(), " tensors)"));
    }
    const std::string& name = tensor_names_[want.tensor_id];
    if (got.tensor_id() != want.tensor_id || got.offset() != want.offset) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": chunk ", first + i, " is tensor '",
                                                     tensor_names_[got.tensor_id()], "' at offset ", got.offset(),
                                                     ", expected tensor '", name, "' at offset ", want.offset,
                                                     " (server ", rank_, "'s chunks in shard-map order)"));
    }
    if (got.length() != want.length) {
      return absl::InvalidArgumentError(absl::StrCat(what, " for tensor '", name, "' chunk at offset ", want.offset,
                                                     ": got ", got.length(), " floats, expected ", want.length));
    }
    const PayloadView& data = values[i];
    if (absl::Status shape = CheckChunkShape(got.encoding(), data, want.length); !shape.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " for tensor '", name, "' chunk at offset ", want.offset, ": ", shape.message()));
    }
    if (!allow_nonfinite) {
      float value = 0;
      const int64_t bad = FindNonFiniteValue(got.encoding(), data, want.length, &value);
      if (bad >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " for tensor '", name, "': element ", want.offset + bad, " is ", NonFiniteName(value)));
      }
    }
  }
  return absl::OkStatus();
}

void DenseShard::DecodeGradient(const PushRequest& req, absl::Span<const PayloadView> values, float* dst) const {
  const int first = req.partial() ? req.first_chunk() : 0;
  for (int i = 0; i < req.chunks_size(); ++i) {
    const Chunk& chunk = chunks_[first + i];
    DecodeChunkValues(req.chunks(i).encoding(), values[i], chunk.length, dst + chunk.base);
  }
}

void DenseShard::Apply(int64_t step, const float* grad) {
  const float lr = model::ScheduledLearningRate(base_lr_, schedule_, step, total_steps_);
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const int64_t base = chunks_[i].base;
    // Averaged chunks: plain SGD at lr 1 (see Create), so w - sum_r (n_r / N)(w - b_r) is the mean.
    optimizers_[i]->Apply(step, chunks_[i].averaged ? 1.0f : lr, grad + base, weights_.data() + base);
  }
}

void DenseShard::Read(int first, int count, PullResponse* resp, float* values) const {
  if (count < 0) count = static_cast<int>(chunks_.size());
  resp->mutable_chunks()->Reserve(count);
  for (int i = first; i < first + count; ++i) {
    const Chunk& c = chunks_[i];
    TensorChunk* chunk = resp->add_chunks();
    chunk->set_tensor_id(c.tensor_id);
    chunk->set_offset(c.offset);
    chunk->set_length(c.length);
    if (values != nullptr) {
      std::memcpy(values, weights_.data() + c.base, 4 * c.length);
      values += c.length;
    } else {
      chunk->mutable_data()->assign(reinterpret_cast<const char*>(weights_.data() + c.base), 4 * c.length);
    }
  }
}

std::vector<TensorChunk> DenseShard::Snapshot() const {
  std::vector<TensorChunk> out;
  AppendSnapshot(&out);
  return out;
}

void DenseShard::Save(ShardCheckpoint* ckpt) const {
  ckpt->layout_fingerprint = layout_fingerprint_;
  ckpt->num_state_vectors = num_state_vectors_;
  ckpt->weights = weights_;
  ckpt->state.assign(num_state_vectors_, std::vector<float>(weights_.size()));
  ckpt->chunks.clear();
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    ChunkSpec& spec = ckpt->chunks.emplace_back();
    spec.set_tensor_id(c.tensor_id);
    spec.set_offset(c.offset);
    spec.set_length(c.length);
    spec.set_server_rank(rank_);
    // An averaged chunk's optimizer has no state: its part of the vectors stays zeros.
    for (int s = 0; s < optimizers_[i]->num_state_vectors(); ++s) {
      const absl::Span<const float> v = optimizers_[i]->state_vector(s);
      std::copy(v.begin(), v.end(), ckpt->state[s].begin() + c.base);
    }
  }
}

absl::Status DenseShard::ValidateCheckpoint(absl::string_view what, const ShardCheckpoint& ckpt) const {
  const int64_t total = num_elements();
  if (ckpt.chunks.size() != chunks_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": it has ", ckpt.chunks.size(), " chunks, this server owns ", chunks_.size()));
  }
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const ChunkSpec& got = ckpt.chunks[i];
    const Chunk& want = chunks_[i];
    if (got.tensor_id() != want.tensor_id || got.offset() != want.offset || got.length() != want.length) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": chunk ", i, " is tensor ", got.tensor_id(), " [",
                                                        got.offset(), ", ", got.offset() + got.length(),
                                                        "), expected tensor '", tensor_names_[want.tensor_id], "' [",
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
  if (static_cast<int64_t>(ckpt.weights.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", ckpt.weights.size(), " weights, expected ", total));
  }
  if (static_cast<int>(ckpt.state.size()) != num_state_vectors_) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", ckpt.state.size(), " state vectors, expected ", num_state_vectors_));
  }
  for (size_t s = 0; s < ckpt.state.size(); ++s) {
    if (static_cast<int64_t>(ckpt.state[s].size()) != total) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": state vector ", s, " has ", ckpt.state[s].size(), " floats, expected ", total));
    }
  }
  return absl::OkStatus();
}

void DenseShard::Install(const ShardCheckpoint& ckpt) {
  std::copy(ckpt.weights.begin(), ckpt.weights.end(), weights_.begin());
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    // An averaged chunk's optimizer has no state (its part of the vectors is zeros).
    for (int s = 0; s < optimizers_[i]->num_state_vectors(); ++s) {
      const float* src = ckpt.state[s].data() + c.base;
      std::copy(src, src + c.length, optimizers_[i]->state_vector(s).begin());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The ShardStorage calls.

absl::StatusOr<std::unique_ptr<StoragePart>> DenseShard::CheckGradient(absl::string_view what, const DecodedPush& push,
                                                                       bool allow_nonfinite) const {
  RETURN_IF_ERROR(ValidateGradient(what, push.header, push.values, allow_nonfinite));
  return std::make_unique<DenseGradient>(push.header, push.values);
}

void DenseShard::AddSquares(const StoragePart& gradient, GradientNorm* norm) const {
  const auto& g = static_cast<const DenseGradient&>(gradient);
  const int first = g.req->partial() ? g.req->first_chunk() : 0;
  for (int i = 0; i < g.req->chunks_size(); ++i) {
    const TensorChunk& chunk = g.req->chunks(i);
    const double squares = ChunkSumOfSquares(chunk.encoding(), g.values[i], chunk.length());
    if (chunks_[first + i].averaged) {  // weights, not a gradient
      norm->uncounted_squares += squares;
      continue;
    }
    norm->sum_of_squares += squares;
    if (squares > norm->largest) {
      norm->largest = squares;
      norm->largest_name = PartName(first + i);
    }
  }
}

absl::StatusOr<std::unique_ptr<StoragePart>> DenseShard::CheckRead(absl::string_view what, const ReadAsk& ask) const {
  // The range is the protocol's: all, none, or a push's part, which CheckGradient checked.
  return std::make_unique<DenseRead>(ask.first_part, ask.num_parts);
}

std::unique_ptr<GradientSlot> DenseShard::NewSlot() const { return std::make_unique<DenseSlot>(num_elements()); }

void DenseShard::StoreGradient(StoragePart& gradient, GradientSlot* slot) const {
  const auto& g = static_cast<const DenseGradient&>(gradient);
  DecodeGradient(*g.req, g.values, static_cast<DenseSlot*>(slot)->grad.data());
}

void DenseShard::Accumulate(absl::Span<const WeightedSlot> terms) {
  // The first term is written rather than added to zeros, and a lone term (weight 1) is applied as
  // it is: one or two passes fewer over the shard, the same values.
  const int64_t n = num_elements();
  const float* first = static_cast<const DenseSlot*>(terms[0].slot)->grad.data();
  if (terms.size() == 1) {
    step_gradient_ = first;
    return;
  }
  Scale(terms[0].weight, first, n, sum_.data());
  for (size_t i = 1; i < terms.size(); ++i) {
    AddScaled(terms[i].weight, static_cast<const DenseSlot*>(terms[i].slot)->grad.data(), n, sum_.data());
  }
  step_gradient_ = sum_.data();
}

void DenseShard::ApplySum(int64_t step) {
  Apply(step, step_gradient_);
  step_gradient_ = nullptr;
}

void DenseShard::ApplyGradient(int64_t step, StoragePart& gradient) {
  const auto& g = static_cast<const DenseGradient&>(gradient);
  DecodeGradient(*g.req, g.values, sum_.data());
  Apply(step, sum_.data());
}

void DenseShard::Read(const StoragePart& ask, PullAnswer* answer) const {
  const auto& r = static_cast<const DenseRead&>(ask);
  const int count = r.count < 0 ? static_cast<int>(chunks_.size()) : r.count;
  Read(r.first, count, answer->resp, answer->values);
  if (answer->values != nullptr && count > 0) {
    const Chunk& last = chunks_[r.first + count - 1];
    answer->values += last.base + last.length - chunks_[r.first].base;
  }
}

void DenseShard::AppendSnapshot(std::vector<TensorChunk>* out) const {
  out->reserve(out->size() + chunks_.size());
  for (const Chunk& c : chunks_) {
    TensorChunk& chunk = out->emplace_back();
    chunk.set_tensor_id(c.tensor_id);
    chunk.set_offset(c.offset);
    chunk.set_length(c.length);
    chunk.set_data(reinterpret_cast<const char*>(weights_.data() + c.base), 4 * c.length);
  }
}

absl::StatusOr<std::unique_ptr<PreparedRestore>> DenseShard::PrepareRestore(absl::string_view what,
                                                                            const ShardCheckpoint& ckpt) const {
  RETURN_IF_ERROR(ValidateCheckpoint(what, ckpt));
  return nullptr;  // installed straight from the checkpoint
}

void DenseShard::Install(const ShardCheckpoint& ckpt, std::unique_ptr<PreparedRestore> /*prepared*/) { Install(ckpt); }

}  // namespace pstrain::server
