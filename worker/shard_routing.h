// Which server each shard's requests go to.
//
// A shard is the part of the model the shard map gives one server rank. Without replicas shard s
// lives on server s only. With replicas (JobSpec.replicas = 2) the cluster view's shard_hosts says,
// per shard, which live server answers its pushes and pulls (the primary) and which one keeps a
// live copy (the backup), which also takes every push of the shard; after a server's death the view
// names the promoted copy as primary and the shard has no backup until the job ends.
#ifndef PSTRAIN_WORKER_SHARD_ROUTING_H_
#define PSTRAIN_WORKER_SHARD_ROUTING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/cluster.pb.h"

namespace pstrain::worker {

struct ShardRoute {
  int primary = 0;  // server rank: PushPull and Pull
  int backup = -1;  // server rank: Push that returns once applied; -1 when the shard has no copy
};

// The routes of shards 0..num_shards-1 under `view`, by shard. Without shard_hosts: shard s to
// server s, no backup. With them: INVALID_ARGUMENT when they do not list exactly shards
// 0..num_shards-1 in order, name a server that is not live in the view, or give a shard the same
// server as primary and backup.
absl::StatusOr<std::vector<ShardRoute>> ShardRoutes(const ClusterView& view, int num_shards);

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_SHARD_ROUTING_H_
