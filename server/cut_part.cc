#include "server/cut_part.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/table_reshard.h"

namespace pstrain::server {
namespace {

// A piece of an old chunk that the destination keeps: the piece, and its first float in the old
// checkpoint's vectors.
struct Slice {
  ChunkSpec chunk;
  int64_t from = 0;
};

}  // namespace

absl::StatusOr<ShardCheckpoint> CutPartFor(const ShardCheckpoint& own, const ShardMap& to, int to_servers, int rank) {
  const std::string what = absl::StrCat("the part of server ", own.rank, "'s checkpoint of step ", own.step,
                                        " for server ", rank, " of ", to_servers);
  if (rank < 0 || rank >= to_servers) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a server in [0, ", to_servers, ")"));
  }
  if (own.base_step >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": it is a delta on step ", own.base_step, "; read it through its chain first"));
  }
  // The destination's ranges, by tensor.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> mine(to.tensors_size());
  for (const ChunkSpec& chunk : to.chunks()) {
    if (chunk.server_rank() != rank || chunk.tensor_id() < 0 || chunk.tensor_id() >= to.tensors_size()) continue;
    mine[chunk.tensor_id()].emplace_back(chunk.offset(), chunk.offset() + chunk.length());
  }
  std::vector<Slice> slices;
  int64_t at = 0;
  for (const ChunkSpec& chunk : own.chunks) {
    if (chunk.tensor_id() < 0 || chunk.tensor_id() >= to.tensors_size() || chunk.offset() < 0 || chunk.length() < 0 ||
        chunk.offset() + chunk.length() > to.tensors(chunk.tensor_id()).num_elements()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": it holds tensor ", chunk.tensor_id(), " [",
                                                     chunk.offset(), ", +", chunk.length(), "), outside the model's ",
                                                     to.tensors_size(), " tensors"));
    }
    const int64_t begin = chunk.offset();
    const int64_t end = begin + chunk.length();
    for (const auto& [lo, hi] : mine[chunk.tensor_id()]) {
      const int64_t from = std::max(lo, begin);
      const int64_t until = std::min(hi, end);
      if (from >= until) continue;
      Slice slice;
      slice.chunk.set_tensor_id(chunk.tensor_id());
      slice.chunk.set_offset(from);
      slice.chunk.set_length(until - from);
      slice.chunk.set_server_rank(own.rank);
      slice.from = at + (from - begin);
      slices.push_back(std::move(slice));
    }
    at += chunk.length();
  }
  bool sized =
      static_cast<int64_t>(own.weights.size()) == at && static_cast<int>(own.state.size()) == own.num_state_vectors;
  for (const std::vector<float>& vector : own.state) sized = sized && static_cast<int64_t>(vector.size()) == at;
  if (!sized) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": it holds ", own.weights.size(), " weights and ",
                                                   own.state.size(), " state vectors for chunks of ", at, " elements"));
  }
  std::sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
    return std::make_pair(a.chunk.tensor_id(), a.chunk.offset()) <
           std::make_pair(b.chunk.tensor_id(), b.chunk.offset());
  });

  ShardCheckpoint part;
  part.rank = own.rank;
  part.step = own.step;
  part.mode = own.mode;
  part.membership_epoch = own.membership_epoch;
  part.layout_fingerprint = own.layout_fingerprint;  // of the old layout: ReshardCheckpoints sets the new one
  part.num_state_vectors = own.num_state_vectors;
  part.state.resize(own.num_state_vectors);
  for (const Slice& slice : slices) {
    part.chunks.push_back(slice.chunk);
    const auto first = static_cast<size_t>(slice.from);
    const auto last = first + static_cast<size_t>(slice.chunk.length());
    part.weights.insert(part.weights.end(), own.weights.begin() + first, own.weights.begin() + last);
    for (int s = 0; s < own.num_state_vectors; ++s) {
      part.state[s].insert(part.state[s].end(), own.state[s].begin() + first, own.state[s].begin() + last);
    }
  }
  for (size_t t = 0; t < own.tables.size(); ++t) {
    ASSIGN_OR_RETURN(std::string table,
                     ReshardTable({own.tables[t]}, to_servers, rank, absl::StrCat(what, ", table ", t)));
    part.tables.push_back(std::move(table));
  }
  return part;
}

}  // namespace pstrain::server
