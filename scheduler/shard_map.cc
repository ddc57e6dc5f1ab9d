#include "scheduler/shard_map.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace scheduler {
namespace {

// Start of server `s`'s range when `total` elements are split over `n` servers: floor(s * total / n),
// so range sizes differ by at most one. Computed in 128 bits: s * total can exceed int64.
int64_t RangeStart(int64_t total, int n, int s) { return static_cast<int64_t>(static_cast<__int128>(total) * s / n); }

absl::Status CheckTensor(const TensorSpec& t, int index) {
  if (t.num_elements() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("shard map: tensor ", index, " '", t.name(), "': got num_elements ",
                                                   t.num_elements(), ", expected > 0"));
  }
  int64_t product = 1;
  for (int64_t d : t.shape()) {
    if (d <= 0 || product > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: tensor ", index, " '", t.name(), "': bad shape [",
                                                     absl::StrJoin(t.shape(), ", "),
                                                     "], expected positive dimensions"));
    }
    product *= d;
  }
  if (product != t.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("shard map: tensor ", index, " '", t.name(), "': num_elements is ",
                                                   t.num_elements(), ", expected the product of shape [",
                                                   absl::StrJoin(t.shape(), ", "), "] = ", product));
  }
  return absl::OkStatus();
}

InitKind ToProto(model::InitKind kind) {
  switch (kind) {
    case model::InitKind::kZeros:
      return ZEROS;
    case model::InitKind::kHeUniform:
      return HE_UNIFORM;
    case model::InitKind::kGlorotUniform:
      return GLOROT_UNIFORM;
  }
  return INIT_UNSPECIFIED;
}

}  // namespace

std::vector<TensorSpec> TensorSpecsOf(const std::vector<model::ParamSpec>& params,
                                      const std::vector<std::string>& averaged) {
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    const model::ParamSpec& p = params[i];
    TensorSpec t;
    t.set_id(i);
    t.set_name(p.name);
    for (int64_t d : p.shape) t.add_shape(d);
    t.set_num_elements(p.num_elements);
    t.set_init(ToProto(p.init));
    t.set_fan_in(p.fan_in);
    t.set_fan_out(p.fan_out);
    t.set_flat_offset(p.flat_offset);
    t.set_averaged(std::find(averaged.begin(), averaged.end(), p.name) != averaged.end());
    tensors.push_back(std::move(t));
  }
  return tensors;
}

absl::StatusOr<ShardMap> BuildShardMap(std::vector<TensorSpec> tensors, int num_servers, int64_t max_chunk_bytes) {
  if (tensors.empty()) return absl::InvalidArgumentError("shard map: the model has no tensors");
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shard map: got ", num_servers, " servers, expected >= 1"));
  }
  if (max_chunk_bytes < 4 || max_chunk_bytes % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard map: max_chunk_bytes is ", max_chunk_bytes, ", expected a positive multiple of 4"));
  }
  const int64_t max_chunk_floats = max_chunk_bytes / 4;

  ShardMap map;
  map.set_version(1);
  map.set_num_servers(num_servers);
  int64_t total = 0;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    TensorSpec& t = tensors[i];
    if (absl::Status s = CheckTensor(t, i); !s.ok()) return s;
    t.set_id(i);
    t.set_flat_offset(total);
    total += t.num_elements();
  }

  // Walk tensors in id order and servers in rank order at once; both partition the flat vector,
  // so chunks come out sorted by (tensor_id, offset) and grouped per server contiguously.
  int server = 0;
  for (const TensorSpec& t : tensors) {
    const int64_t t_begin = t.flat_offset();
    const int64_t t_end = t_begin + t.num_elements();
    int64_t pos = t_begin;
    while (pos < t_end) {
      while (RangeStart(total, num_servers, server + 1) <= pos) ++server;
      const int64_t piece_end = std::min(t_end, RangeStart(total, num_servers, server + 1));
      // Cut the piece into equal-ish chunks, none over the limit.
      const int64_t length = piece_end - pos;
      const int64_t pieces = (length + max_chunk_floats - 1) / max_chunk_floats;
      for (int64_t k = 0; k < pieces; ++k) {
        const int64_t begin = pos + length * k / pieces;
        const int64_t end = pos + length * (k + 1) / pieces;
        ChunkSpec* chunk = map.add_chunks();
        chunk->set_tensor_id(t.id());
        chunk->set_offset(begin - t_begin);
        chunk->set_length(end - begin);
        chunk->set_server_rank(server);
      }
      pos = piece_end;
    }
  }
  for (TensorSpec& t : tensors) *map.add_tensors() = std::move(t);
  return map;
}

FlatRange ServerFlatRange(const ShardMap& map, int server_rank) {
  FlatRange range;
  bool found = false;
  for (const ChunkSpec& c : map.chunks()) {
    if (c.server_rank() != server_rank) continue;
    const int64_t begin = map.tensors(c.tensor_id()).flat_offset() + c.offset();
    const int64_t end = begin + c.length();
    if (!found) {
      range = {begin, end};
      found = true;
    } else {
      range.begin = std::min(range.begin, begin);
      range.end = std::max(range.end, end);
    }
  }
  return range;
}

}  // namespace scheduler
}  // namespace pstrain
