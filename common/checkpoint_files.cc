#include "common/checkpoint_files.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// Parses "server-<rank>-step-<step>.ckpt"; false for any other name (temporary files included).
bool ParseCheckpointName(absl::string_view name, int* rank, int64_t* step) {
  if (!absl::ConsumePrefix(&name, "server-") || !absl::ConsumeSuffix(&name, ".ckpt")) return false;
  const size_t sep = name.find("-step-");
  if (sep == absl::string_view::npos) return false;
  const absl::string_view rank_text = name.substr(0, sep);
  const absl::string_view step_text = name.substr(sep + 6);
  return AllDigits(rank_text) && AllDigits(step_text) && absl::SimpleAtoi(rank_text, rank) &&
         absl::SimpleAtoi(step_text, step);
}

// Calls fn(rank, step) for every checkpoint file name in `dir`; false when it cannot be listed.
template <typename Fn>
bool ForEachCheckpoint(const std::string& dir, Fn fn) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  while (const dirent* entry = ::readdir(d)) {
    int rank = 0;
    int64_t step = 0;
    if (ParseCheckpointName(entry->d_name, &rank, &step)) fn(rank, step);
  }
  ::closedir(d);
  return true;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int rank, int64_t step) {
  return absl::StrFormat("%s/server-%d-step-%010d.ckpt", dir, rank, step);
}

absl::StatusOr<int64_t> LatestConsistentStep(const std::string& dir, int num_servers) {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("latest consistent checkpoint: num_servers is ", num_servers, ", expected >= 1"));
  }
  ASSIGN_OR_RETURN(const ConsistentCut cut, LatestConsistentCut(dir, {{0, num_servers}}));
  return cut.step;
}

int ServersAt(const std::vector<ServerCountEra>& eras, int64_t step) {
  int servers = eras.front().num_servers;
  for (size_t i = 1; i < eras.size() && eras[i].from_step < step; ++i) servers = eras[i].num_servers;
  return servers;
}

absl::StatusOr<ConsistentCut> LatestConsistentCut(const std::string& dir, const std::vector<ServerCountEra>& eras) {
  if (eras.empty()) return absl::InvalidArgumentError("latest consistent checkpoint: no server counts given");
  int most = 0;
  for (const ServerCountEra& era : eras) {
    if (era.num_servers < 1) {
      return absl::InvalidArgumentError(absl::StrCat("latest consistent checkpoint: the server count from step ",
                                                     era.from_step, " is ", era.num_servers, ", expected >= 1"));
    }
    most = std::max(most, era.num_servers);
  }
  std::map<int64_t, std::set<int>> ranks_by_step;
  const bool listed = ForEachCheckpoint(dir, [&](int rank, int64_t step) {
    if (rank < most) ranks_by_step[step].insert(rank);
  });
  if (!listed) {
    return ErrnoStatus(errno, absl::StrCat("listing checkpoint folder '", dir, "'"));
  }
  for (auto it = ranks_by_step.rbegin(); it != ranks_by_step.rend(); ++it) {
    const int servers = ServersAt(eras, it->first);
    // The ranks are sorted: the step's count is there when its first `servers` ranks are.
    if (static_cast<int>(it->second.size()) >= servers && *std::next(it->second.begin(), servers - 1) == servers - 1) {
      return ConsistentCut{it->first, servers};
    }
  }
  if (eras.size() == 1) {
    return absl::NotFoundError(
        absl::StrCat("no step in '", dir, "' has a checkpoint from all ", eras.front().num_servers, " servers"));
  }
  return absl::NotFoundError(absl::StrCat("no step in '", dir, "' has a checkpoint from all the servers of its ",
                                          "server count (", eras.size(), " server counts since the job began)"));
}

std::vector<int64_t> ListCheckpointSteps(const std::string& dir, int rank) {
  std::vector<int64_t> steps;
  ForEachCheckpoint(dir, [&](int r, int64_t step) {
    if (r == rank) steps.push_back(step);
  });
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace pstrain
