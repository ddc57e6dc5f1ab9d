#include "common/server_counts.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "proto/job.pb.h"

namespace pstrain {
namespace {

std::string PathIn(const std::string& dir) { return absl::StrCat(dir, "/", kServerCountsName); }

}  // namespace

absl::StatusOr<std::vector<ServerCountEra>> ReadServerCounts(const std::string& dir, int manifest_servers) {
  const std::string path = PathIn(dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::vector<ServerCountEra>{{0, manifest_servers}};
  ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(path, "server counts", int64_t{1} << 20));
  ServerCountHistory history;
  if (!google::protobuf::TextFormat::ParseFromString(text, &history)) {
    return absl::DataLossError(absl::StrCat("server counts ", path, ": not a ServerCountHistory textproto"));
  }
  if (history.eras_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("server counts ", path, ": no eras; expected at least one"));
  }
  std::vector<ServerCountEra> eras;
  for (const ServerCountHistory::Era& era : history.eras()) {
    const std::string where = absl::StrCat("server counts ", path, ": era ", eras.size(), " (from step ",
                                           era.from_step(), ", ", era.num_servers(), " servers)");
    if (era.num_servers() < 1) return absl::InvalidArgumentError(absl::StrCat(where, ": expected >= 1 servers"));
    if (eras.empty() && era.from_step() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected the first era from step 0"));
    }
    if (!eras.empty() && era.from_step() <= eras.back().from_step) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected a from_step above the previous era's ", eras.back().from_step));
    }
    eras.push_back({era.from_step(), era.num_servers()});
  }
  return eras;
}

absl::Status WriteServerCounts(const std::string& dir, const std::vector<ServerCountEra>& eras, mode_t mode) {
  ServerCountHistory history;
  for (const ServerCountEra& era : eras) {
    ServerCountHistory::Era* out = history.add_eras();
    out->set_from_step(era.from_step);
    out->set_num_servers(era.num_servers);
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(history, &text)) {
    return absl::InternalError("server counts: cannot print them as text");
  }
  return WriteFileAtomically(
      PathIn(dir), "server counts",
      absl::StrCat("# Written by pstrain-scheduler: the server count of each stretch of checkpoints.\n", text), mode);
}

std::vector<ServerCountEra> ContinueFrom(const std::vector<ServerCountEra>& eras, int64_t step, int num_servers) {
  // A job takes no checkpoint of step 0 (its initial state needs none): continuing from step 0 is
  // starting over.
  if (step <= 0) return {{0, num_servers}};
  std::vector<ServerCountEra> out;
  for (const ServerCountEra& era : eras) {
    if (out.empty() || era.from_step < step) out.push_back(era);
  }
  if (ServersAt(out, step) != num_servers) out.push_back({step, num_servers});
  return out;
}

int ServersOfMap(const ShardMap& map, int job_servers) {
  return map.num_servers() > 0 ? map.num_servers() : job_servers;
}

}  // namespace pstrain
