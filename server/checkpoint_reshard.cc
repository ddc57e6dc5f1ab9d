#include "server/checkpoint_reshard.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/checkpoint_chain.h"
#include "server/table_reshard.h"

namespace pstrain::server {
namespace {

// An old checkpoint's chunk in the flat vector of `to`'s tensors.
struct Piece {
  int64_t flat_begin = 0;
  int64_t length = 0;
  size_t ckpt = 0;  // index in the cut
  int64_t at = 0;   // the chunk's first float in that checkpoint's weights
};

std::string Name(const ShardCheckpoint& ckpt) {
  return absl::StrCat("server ", ckpt.rank, "'s checkpoint of step ", ckpt.step);
}

}  // namespace

absl::StatusOr<ShardCheckpoint> ReshardCheckpoints(const std::vector<ShardCheckpoint>& cut, const ShardMap& to,
                                                   int to_servers, int rank, ReshardCounts* counts) {
  std::vector<const ShardCheckpoint*> borrowed;
  borrowed.reserve(cut.size());
  for (const ShardCheckpoint& ckpt : cut) borrowed.push_back(&ckpt);
  return ReshardCheckpoints(borrowed, to, to_servers, rank, counts);
}

absl::StatusOr<ShardCheckpoint> ReshardCheckpoints(const std::vector<const ShardCheckpoint*>& cut, const ShardMap& to,
                                                   int to_servers, int rank, ReshardCounts* counts) {
  if (cut.empty()) return absl::InvalidArgumentError("re-sharding a cut: no checkpoints in it");
  const ShardCheckpoint& first = *cut.front();
  std::vector<Piece> pieces;
  for (size_t i = 0; i < cut.size(); ++i) {
    const ShardCheckpoint& ckpt = *cut[i];
    if (ckpt.base_step >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("re-sharding: ", Name(ckpt), " is a delta on step ",
                                                     ckpt.base_step, "; read it through its chain first"));
    }
    if (ckpt.step != first.step || ckpt.mode != first.mode || ckpt.num_state_vectors != first.num_state_vectors) {
      return absl::InvalidArgumentError(absl::StrCat("re-sharding: ", Name(ckpt), " (mode ", Mode_Name(ckpt.mode), ", ",
                                                     ckpt.num_state_vectors, " optimizer state vectors) is not of ",
                                                     Name(first), "'s cut (mode ", Mode_Name(first.mode), ", ",
                                                     first.num_state_vectors, ")"));
    }
    if (ckpt.tables.size() != first.tables.size()) {
      return absl::InvalidArgumentError(absl::StrCat("re-sharding: ", Name(ckpt), " holds ", ckpt.tables.size(),
                                                     " embedding tables, but ", Name(first), " holds ",
                                                     first.tables.size()));
    }
    int64_t at = 0;
    for (const ChunkSpec& chunk : ckpt.chunks) {
      if (chunk.tensor_id() < 0 || chunk.tensor_id() >= to.tensors_size() || chunk.offset() < 0 || chunk.length() < 0 ||
          chunk.offset() + chunk.length() > to.tensors(chunk.tensor_id()).num_elements()) {
        return absl::InvalidArgumentError(absl::StrCat("re-sharding: ", Name(ckpt), " holds tensor ", chunk.tensor_id(),
                                                       " [", chunk.offset(), ", +", chunk.length(),
                                                       "), outside the model's ", to.tensors_size(), " tensors"));
      }
      pieces.push_back({to.tensors(chunk.tensor_id()).flat_offset() + chunk.offset(), chunk.length(), i, at});
      at += chunk.length();
    }
    bool sized = static_cast<int64_t>(ckpt.weights.size()) == at &&
                 static_cast<int>(ckpt.state.size()) == ckpt.num_state_vectors;
    for (const std::vector<float>& vector : ckpt.state) sized = sized && static_cast<int64_t>(vector.size()) == at;
    if (!sized) {
      return absl::InvalidArgumentError(absl::StrCat("re-sharding: ", Name(ckpt), " holds ", ckpt.weights.size(),
                                                     " weights and ", ckpt.state.size(),
                                                     " state vectors for chunks of ", at, " elements"));
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.flat_begin < b.flat_begin; });
  for (size_t p = 1; p < pieces.size(); ++p) {
    if (pieces[p].flat_begin < pieces[p - 1].flat_begin + pieces[p - 1].length) {
      return absl::InvalidArgumentError(
          absl::StrCat("re-sharding: element ", pieces[p].flat_begin, " of the flat model is held by both ",
                       Name(*cut[pieces[p - 1].ckpt]), " and ", Name(*cut[pieces[p].ckpt])));
    }
  }

  ShardCheckpoint out;
  out.rank = rank;
  out.step = first.step;
  out.mode = first.mode;
  out.membership_epoch = first.membership_epoch;
  out.layout_fingerprint = LayoutFingerprint(to, rank);
  out.num_state_vectors = first.num_state_vectors;
  for (const ChunkSpec& chunk : to.chunks()) {
    if (chunk.server_rank() == rank) out.chunks.push_back(chunk);
  }
  std::sort(out.chunks.begin(), out.chunks.end(), [](const ChunkSpec& a, const ChunkSpec& b) {
    return std::make_pair(a.tensor_id(), a.offset()) < std::make_pair(b.tensor_id(), b.offset());
  });
  int64_t total = 0;
  for (const ChunkSpec& chunk : out.chunks) total += chunk.length();
  out.weights.resize(total);
  out.state.assign(out.num_state_vectors, std::vector<float>(total));
  int64_t at = 0;
  for (const ChunkSpec& chunk : out.chunks) {
    const int64_t begin = to.tensors(chunk.tensor_id()).flat_offset() + chunk.offset();
    const int64_t end = begin + chunk.length();
    // The first piece that ends after `begin`.
    auto it = std::upper_bound(pieces.begin(), pieces.end(), begin,
                               [](int64_t x, const Piece& p) { return x < p.flat_begin + p.length; });
    for (int64_t pos = begin; pos < end;) {
      if (it == pieces.end() || it->flat_begin > pos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "re-sharding the cut of step ", first.step, " (", cut.size(), " checkpoints): no checkpoint holds element ",
            pos - to.tensors(chunk.tensor_id()).flat_offset(), " of tensor '", to.tensors(chunk.tensor_id()).name(),
            "' (a server's checkpoint is missing from the cut)"));
      }
      const int64_t take = std::min(end, it->flat_begin + it->length) - pos;
      const ShardCheckpoint& src = *cut[it->ckpt];
      if (counts != nullptr) {
        const int64_t bytes = take * static_cast<int64_t>(sizeof(float)) * (1 + out.num_state_vectors);
        counts->bytes += bytes;
        counts->bytes_moved += src.rank != rank ? bytes : 0;
      }
      const int64_t from = it->at + (pos - it->flat_begin);
      const int64_t into = at + (pos - begin);
      std::copy_n(src.weights.begin() + from, take, out.weights.begin() + into);
      for (int s = 0; s < out.num_state_vectors; ++s) {
        std::copy_n(src.state[s].begin() + from, take, out.state[s].begin() + into);
      }
      pos += take;
      ++it;
    }
    at += chunk.length();
  }
  for (size_t t = 0; t < first.tables.size(); ++t) {
    std::vector<absl::string_view> parts;
    for (const ShardCheckpoint* ckpt : cut) parts.push_back(ckpt->tables[t]);
    ASSIGN_OR_RETURN(std::string table,
                     ReshardTable(parts, to_servers, rank,
                                  absl::StrCat("re-sharding table ", t, " of the cut of step ", first.step), counts));
    out.tables.push_back(std::move(table));
  }
  return out;
}

absl::StatusOr<std::vector<ShardCheckpoint>> ReadCut(const std::string& dir, int from_servers, int64_t step) {
  std::vector<ShardCheckpoint> cut;
  cut.reserve(from_servers);
  for (int old = 0; old < from_servers; ++old) {
    absl::StatusOr<ShardCheckpoint> ckpt = ReadCheckpointChain(dir, old, step);
    if (!ckpt.ok()) {
      return absl::Status(ckpt.status().code(),
                          absl::StrCat("reading the cut of step ", step, " taken on ", from_servers,
                                       " servers: server ", old, "'s checkpoint: ", ckpt.status().message()));
    }
    cut.push_back(*std::move(ckpt));
  }
  return cut;
}

absl::StatusOr<ShardCheckpoint> ReadResharded(const std::string& dir, int from_servers, int64_t step,
                                              const ShardMap& to, int to_servers, int rank) {
  ASSIGN_OR_RETURN(const std::vector<ShardCheckpoint> cut, ReadCut(dir, from_servers, step));
  return ReshardCheckpoints(cut, to, to_servers, rank);
}

}  // namespace pstrain::server
