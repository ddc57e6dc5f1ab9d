#include "server/checkpoint_chain.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "server/table_delta.h"

namespace pstrain::server {
namespace {

// The chain ending at `step`, newest first, without the fallback message.
absl::StatusOr<std::vector<ShardCheckpoint>> ReadLinks(const std::string& dir, int rank, int64_t step) {
  std::vector<ShardCheckpoint> links;
  for (int64_t s = step;;) {
    const std::string path = CheckpointPath(dir, rank, s);
    absl::StatusOr<ShardCheckpoint> link = ReadCheckpoint(path);
    if (!link.ok()) {
      if (links.empty()) return link.status();
      if (absl::IsNotFound(link.status())) {
        return absl::DataLossError(absl::StrCat("a gap in the chain of step ", step, ": the delta of step ",
                                                links.back().step, " follows step ", s, ", whose file is missing (",
                                                link.status().message(), ")"));
      }
      return absl::Status(link.status().code(),
                          absl::StrCat("the chain of step ", step, " is broken: the delta of step ", links.back().step,
                                       " follows step ", s, ", whose file is bad: ", link.status().message()));
    }
    if (link->rank != rank || link->step != s) {
      return absl::DataLossError(absl::StrCat("checkpoint '", path, "' holds server ", link->rank, "'s step ",
                                              link->step, ", expected server ", rank, "'s step ", s));
    }
    const int64_t base = link->base_step;
    links.push_back(std::move(link).value());
    if (base < 0) return links;
    if (links.size() >= static_cast<size_t>(kMaxChainLength)) {
      return absl::DataLossError(absl::StrCat("the chain of step ", step, " in '", dir, "' runs past ", kMaxChainLength,
                                              " files without a whole checkpoint"));
    }
    s = base;
  }
}

absl::StatusOr<ShardCheckpoint> Merge(std::vector<ShardCheckpoint> links) {
  ShardCheckpoint whole = std::move(links.back());
  for (size_t i = links.size() - 1; i-- > 0;) {
    ASSIGN_OR_RETURN(whole, ApplyCheckpointDelta(std::move(whole), std::move(links[i])));
  }
  whole.base_step = -1;
  return whole;
}

absl::StatusOr<ShardCheckpoint> ReadChain(const std::string& dir, int rank, int64_t step) {
  ASSIGN_OR_RETURN(std::vector<ShardCheckpoint> links, ReadLinks(dir, rank, step));
  return Merge(std::move(links));
}

}  // namespace

absl::StatusOr<ShardCheckpoint> ApplyCheckpointDelta(ShardCheckpoint whole, ShardCheckpoint delta) {
  if (delta.tables.size() != whole.tables.size()) {
    return absl::DataLossError(absl::StrCat("the delta of step ", delta.step, " holds ", delta.tables.size(),
                                            " tables, the checkpoint of step ", whole.step, " before it ",
                                            whole.tables.size()));
  }
  for (size_t t = 0; t < delta.tables.size(); ++t) {
    ASSIGN_OR_RETURN(whole.tables[t], MergeTableDelta(whole.tables[t], delta.tables[t],
                                                      absl::StrCat("table ", t, " of the delta of step ", delta.step,
                                                                   " on step ", whole.step)));
  }
  // The dense values are whole in every delta.
  whole.step = delta.step;
  whole.mode = delta.mode;
  whole.membership_epoch = delta.membership_epoch;
  whole.layout_fingerprint = delta.layout_fingerprint;
  whole.chunks = std::move(delta.chunks);
  whole.num_state_vectors = delta.num_state_vectors;
  whole.weights = std::move(delta.weights);
  whole.state = std::move(delta.state);
  whole.base_step = -1;
  return whole;
}

absl::StatusOr<ShardCheckpoint> ReadCheckpointChain(const std::string& dir, int rank, int64_t step) {
  absl::StatusOr<ShardCheckpoint> whole = ReadChain(dir, rank, step);
  if (whole.ok() || absl::IsNotFound(whole.status())) return whole;
  // Name what still restores: the newest earlier step whose chain reads.
  std::vector<int64_t> steps = ListCheckpointSteps(dir, rank);
  std::string fallback = "no earlier step restores";
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it >= step || !ReadChain(dir, rank, *it).ok()) continue;
    fallback = absl::StrCat("the chain restores up to step ", *it);
    break;
  }
  return absl::Status(whole.status().code(), absl::StrCat(whole.status().message(), "; ", fallback));
}

absl::StatusOr<int64_t> ReadCheckpointBaseStep(const std::string& path) {
  ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, "checkpoint"));
  char header[12];
  char tail[12];
  const off_t size = ::lseek(fd, 0, SEEK_END);
  const bool read =
      size >= 12 + static_cast<off_t>(sizeof(tail)) && ::pread(fd, header, 12, 0) == 12 &&
      ::pread(fd, tail, sizeof(tail), size - static_cast<off_t>(sizeof(tail))) == static_cast<ssize_t>(sizeof(tail));
  ::close(fd);
  if (!read || std::memcmp(header, kCheckpointMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "': too short or bad magic"));
  }
  uint32_t version;
  std::memcpy(&version, header + 8, sizeof(version));
  if (version != kCheckpointVersionDelta) return -1;
  int64_t base;
  std::memcpy(&base, tail, sizeof(base));  // the base step, then the CRC
  return base;
}

std::vector<int64_t> PruneCheckpoints(const std::string& dir, int rank, size_t keep, int64_t keep_from) {
  const std::vector<int64_t> steps = ListCheckpointSteps(dir, rank);
  if (keep == 0 || steps.size() <= keep) return {};
  // The oldest kept step's chain, back to its base: everything before that base goes. The oldest
  // kept step is the keep rule's, or the oldest step from keep_from on when that is older.
  int64_t needed_from = steps[steps.size() - keep];
  const auto asked = std::lower_bound(steps.begin(), steps.end(), keep_from);
  if (asked == steps.begin()) return {};
  if (asked != steps.end() && *asked < needed_from) needed_from = *asked;
  for (int i = 0; i < kMaxChainLength; ++i) {
    absl::StatusOr<int64_t> base = ReadCheckpointBaseStep(CheckpointPath(dir, rank, needed_from));
    if (!base.ok()) {
      LOG(WARNING) << "server " << rank << ": not pruning checkpoints before step " << needed_from << ": "
                   << base.status();
      return {};
    }
    if (*base < 0) break;
    needed_from = *base;
  }
  std::vector<int64_t> removed;
  for (int64_t s : steps) {
    if (s >= needed_from) break;
    const std::string old = CheckpointPath(dir, rank, s);
    std::error_code ec;
    if (std::filesystem::remove(old, ec)) {
      removed.push_back(s);
    } else if (ec) {
      LOG(WARNING) << "server " << rank << ": cannot remove old checkpoint '" << old << "': " << ec.message();
    }
  }
  return removed;
}

}  // namespace pstrain::server
