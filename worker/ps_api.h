// What a worker asks of the parameter servers, as an interface with no transport in it.
//
// Four asynchronous calls, each addressed to a server rank, and blocking fan-outs over shards
// built on them once, here. worker/ps_client.h implements the calls over gRPC (raw tensor bytes,
// several connections per server); tests implement them in-process over server::ParameterStore,
// with injected drops and delays, so that the worker's recovery logic runs without sockets.
//
// The contract of each call is the server's (server/parameter_store.h): OK, ABORTED (the
// membership changed), FAILED_PRECONDITION, INVALID_ARGUMENT, ... An implementation adds only
// transport errors: UNAVAILABLE when the server cannot be reached (it may have died), DEADLINE_EXCEEDED,
// CANCELLED after CancelAll, and DATA_LOSS for an answer that does not decode.
//
// Thread safety: implementations are thread-safe, except UpdateServers (see there).
#ifndef PSTRAIN_WORKER_PS_API_H_
#define PSTRAIN_WORKER_PS_API_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor_messages.h"
#include "proto/cluster.pb.h"
#include "proto/ps.pb.h"
#include "worker/shard_routing.h"

namespace pstrain::worker {

class PsApi {
 public:
  using Done = std::function<void(absl::Status)>;

  virtual ~PsApi() = default;

  // Server ranks this client can address: 0 .. num_servers() - 1.
  virtual int num_servers() const = 0;

  // Follows `view` (a replacement took a dead server's rank at another address). Must not run
  // concurrently with calls of this client (the worker calls it between steps).
  virtual void UpdateServers(const ClusterView& view) = 0;

  // Start one call; `done` runs exactly once, possibly on another thread, possibly before the
  // call returns. `request` (and the values it points at) and `response` are borrowed until
  // `done` runs. `group` (any non-null tag) lets CancelGroup end the call early.
  virtual void PullAsync(int server, const PullRequest* request, IncomingPull* response, Done done) = 0;
  virtual void PushAsync(int server, const OutgoingPush* request, PushResponse* response, Done done,
                         const void* group = nullptr) = 0;
  virtual void PushPullAsync(int server, const OutgoingPush* request, IncomingPull* response, Done done,
                             const void* group = nullptr) = 0;
  virtual void FinishEpochAsync(int server, const FinishEpochRequest* request, FinishEpochResponse* response,
                                Done done) = 0;

  // Ends the calls in flight that were started with `group` (their `done` runs with an error);
  // later calls are not affected.
  virtual void CancelGroup(const void* group) = 0;

  // Ends every call in flight and makes later calls fail at once with CANCELLED `reason`. Used
  // when the job fails while the worker is parked in a sync step.
  virtual void CancelAll(const std::string& reason) = 0;

  // Fan-outs over shards (see worker/shard_routing.h): request i is for shard i (the caller sets
  // its `shard`) and goes to server routes[i].primary, whose answer is responses[i].
  // PushPullShards also sends request i as a Push to routes[i].backup where there is one; the
  // caller sets wait_until_applied, so that answer comes once the backup applied the step too.
  // Block until every call answered; return the first error (primaries in shard order, then
  // backups) or OK.
  absl::Status PullShards(const std::vector<ShardRoute>& routes, const std::vector<PullRequest>& requests,
                          std::vector<IncomingPull>* responses);
  absl::Status PushPullShards(const std::vector<ShardRoute>& routes, const std::vector<OutgoingPush>& requests,
                              std::vector<IncomingPull>* responses);
  // FinishEpoch for every shard on its primary and its backup; requests[i] is for shard i.
  absl::Status FinishEpochShards(const std::vector<ShardRoute>& routes,
                                 const std::vector<FinishEpochRequest>& requests);
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_PS_API_H_
