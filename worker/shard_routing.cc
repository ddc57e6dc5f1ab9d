#include "worker/shard_routing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pstrain::worker {
namespace {

bool IsLiveServer(const ClusterView& view, int rank) {
  return std::any_of(view.servers().begin(), view.servers().end(),
                     [rank](const ServerInfo& s) { return s.rank() == rank; });
}

}  // namespace

absl::StatusOr<std::vector<ShardRoute>> ShardRoutes(const ClusterView& view, int num_shards) {
  std::vector<ShardRoute> routes(num_shards);
  if (view.shard_hosts().empty()) {
    for (int s = 0; s < num_shards; ++s) routes[s].primary = s;
    return routes;
  }
  const std::string where = absl::StrCat("cluster view at membership epoch ", view.membership_epoch());
  if (view.shard_hosts_size() != num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", view.shard_hosts_size(), " shard hosts, expected one per shard (", num_shards, ")"));
  }
  for (int s = 0; s < num_shards; ++s) {
    const ShardHost& host = view.shard_hosts(s);
    if (host.shard() != s) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shard host at position ", s, " is for shard ", host.shard(), ", expected ", s));
    }
    if (!IsLiveServer(view, host.primary())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shard ", s, " is served by server ", host.primary(),
                                                     ", which is not a live server of the view"));
    }
    routes[s].primary = host.primary();
    if (!host.has_backup()) continue;
    if (!IsLiveServer(view, host.backup()) || host.backup() == host.primary()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shard ", s, " has its copy on server ", host.backup(),
                                                     ", expected a live server other than its primary ",
                                                     host.primary()));
    }
    routes[s].backup = host.backup();
  }
  return routes;
}

}  // namespace pstrain::worker
