#include "scheduler/final_model_assembly.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/model_file.h"
#include "model/param_spec.h"

namespace pstrain {
namespace scheduler {
namespace {

// The shard map's tensors as the model file's params (name and shape, in order).
std::vector<model::ParamSpec> ModelParams(const ShardMap& map) {
  std::vector<model::ParamSpec> params;
  params.reserve(map.tensors_size());
  for (const TensorSpec& t : map.tensors()) {
    model::ParamSpec p;
    p.name = t.name();
    p.shape.assign(t.shape().begin(), t.shape().end());
    p.num_elements = t.num_elements();
    p.flat_offset = t.flat_offset();
    params.push_back(std::move(p));
  }
  return params;
}

int64_t TotalElements(const ShardMap& map) {
  int64_t total = 0;
  for (const TensorSpec& t : map.tensors()) total = std::max(total, t.flat_offset() + t.num_elements());
  return total;
}

std::string Describe(const FinalShard& shard) {
  return absl::StrCat("final shard ", shard.shard(), " from server ", shard.server_rank());
}

}  // namespace

FinalModelAssembly::FinalModelAssembly(int num_shards) : num_shards_(num_shards) {}

bool FinalModelAssembly::Holds(int shard) const {
  return shard >= 0 && shard < static_cast<int>(held_.size()) && held_[shard];
}

bool FinalModelAssembly::Complete() const {
  return static_cast<int>(held_.size()) == num_shards_ &&
         std::all_of(held_.begin(), held_.end(), [](bool h) { return h; });
}

absl::Status FinalModelAssembly::CheckIndex(const FinalShard& shard) const {
  if (shard.shard() < 0 || shard.shard() >= num_shards_) {
    return absl::InvalidArgumentError(absl::StrCat(Describe(shard), ": no such shard, expected 0..", num_shards_ - 1));
  }
  return absl::OkStatus();
}

absl::Status FinalModelAssembly::Take(const FinalShard& shard, const ShardMap& map) {
  if (absl::Status s = CheckIndex(shard); !s.ok()) return s;
  const std::string what = Describe(shard);
  // The shard map's chunks of this shard, in its (tensor_id, offset) order.
  std::vector<const ChunkSpec*> expected;
  for (const ChunkSpec& c : map.chunks()) {
    if (c.server_rank() == shard.shard()) expected.push_back(&c);
  }
  if (shard.chunks_size() != static_cast<int>(expected.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", shard.chunks_size(), " chunks, expected ", expected.size(), " (the shard map's)"));
  }
  // Checked in full before anything is copied.
  for (int i = 0; i < shard.chunks_size(); ++i) {
    const FinalShard::Chunk& got = shard.chunks(i);
    const ChunkSpec& want = *expected[i];
    if (got.tensor_id() != want.tensor_id() || got.offset() != want.offset() || got.length() != want.length()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": chunk ", i, " is tensor ", got.tensor_id(), " [",
                                                     got.offset(), ", +", got.length(), "), expected tensor ",
                                                     want.tensor_id(), " [", want.offset(), ", +", want.length(), ")"));
    }
    if (got.data().size() != static_cast<size_t>(want.length()) * sizeof(float)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": chunk ", i, " of tensor '", map.tensors(want.tensor_id()).name(), "' holds ",
                       got.data().size(), " bytes, expected ", want.length() * static_cast<int64_t>(sizeof(float))));
    }
    for (int64_t k = 0; k < want.length(); ++k) {
      float v;
      std::memcpy(&v, got.data().data() + k * sizeof(float), sizeof(float));
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": tensor '", map.tensors(want.tensor_id()).name(),
                                                       "' element ", want.offset() + k, " is ", v,
                                                       "; the final model holds finite values only"));
      }
    }
  }
  if (values_.empty()) values_.assign(TotalElements(map), 0.0f);
  if (held_.empty()) held_.assign(num_shards_, false);
  for (int i = 0; i < shard.chunks_size(); ++i) {
    const ChunkSpec& c = *expected[i];
    const int64_t at = map.tensors(c.tensor_id()).flat_offset() + c.offset();
    std::memcpy(values_.data() + at, shard.chunks(i).data().data(), c.length() * sizeof(float));
  }
  held_[shard.shard()] = true;
  return absl::OkStatus();
}

absl::StatusOr<std::string> FinalModelAssembly::Serialize(const ShardMap& map) const {
  return model::SerializeModelFile(ModelParams(map), values_);
}

void FinalModelAssembly::MarkWritten() {
  written_ = true;
  values_.clear();
  values_.shrink_to_fit();
}

}  // namespace scheduler
}  // namespace pstrain
