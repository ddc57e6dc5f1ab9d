// Who takes part in the job: registration, ranks, the cluster view and liveness.
//
// Ranks are handed out per role in order of registration (0..n-1). Registering the same
// (role, instance id) or the same non-empty (role, address) again returns the same rank, so a role
// may retry Register safely. A worker with neither cannot be told apart from another one and always
// gets a fresh rank.
//
// The membership epoch starts at 1 (nobody registered) and is bumped by every change of the member
// set; today that is each new registration, later also a death or a replacement (churn). Servers
// compare the epoch a push was computed under with the current one, so it must change whenever
// the view does.
//
// Liveness. Roles start heartbeating only once they are set up (after the start-up barrier), so a
// member is watched from its first heartbeat on: FindDead lists the members whose last heartbeat is
// older than `dead_after`. Members that registered but never heartbeated are "starting";
// FindNeverStarted lists those registered longer ago than a start-up limit. The caller decides what
// a death means (today: the job fails).
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_MEMBERSHIP_H_
#define PSTRAIN_SCHEDULER_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"

namespace pstrain {
namespace scheduler {

// "server" or "worker".
std::string RoleName(Role role);

class Membership {
 public:
  struct Options {
    int num_servers = 1;
    int num_workers = 1;
    // A member silent for longer than this is dead.
    absl::Duration dead_after = absl::Seconds(3);
    // Copied into every view.
    ShardMap shard_map;
    int64_t train_samples = 0;
    int64_t test_samples = 0;
    int64_t total_steps = 0;
  };

  explicit Membership(Options options);

  // Registers the process `instance_id` (may be empty) of a role listening at `address` at time
  // `now` and returns its rank. INVALID_ARGUMENT for a role other than SERVER or WORKER, or a server
  // without an address; FAILED_PRECONDITION "job already has 2 workers" when every slot of the role
  // is taken by another process.
  absl::StatusOr<int> Register(Role role, const std::string& address, const std::string& instance_id,
                               absl::Time now);
  // The same without an instance id.
  absl::StatusOr<int> Register(Role role, const std::string& address, absl::Time now) {
    return Register(role, address, "", now);
  }

  // Records a heartbeat; from now on the member is watched. FAILED_PRECONDITION when (role, rank)
  // is not registered.
  absl::Status Heartbeat(Role role, int rank, absl::Time now);

  // True once every configured server and worker has registered.
  bool complete() const;
  int num_registered(Role role) const;
  int64_t epoch() const { return epoch_; }

  // The view: epoch, WAITING_FOR_ROLES or RUNNING (the caller overrides the state once the job
  // has ended), servers and workers sorted by rank, shard map, sample counts and total steps.
  ClusterView View() const;

  // One line per member that has heartbeated and then been silent for longer than dead_after at
  // `now`, e.g. "worker 1 at 127.0.0.1:4567 sent no heartbeat for 3.2 s". Empty when all are alive.
  std::vector<std::string> FindDead(absl::Time now) const;

  // One line per member that registered more than `limit` before `now` and has not heartbeated
  // since, e.g. "server 0 at 127.0.0.1:4001 sent no heartbeat in the 300 s since it registered".
  std::vector<std::string> FindNeverStarted(absl::Time now, absl::Duration limit) const;

  // True when every registered server has heartbeated at or after `t` (true with no servers).
  bool AllServersHeardSince(absl::Time t) const;

  // "worker 1 at 127.0.0.1:4567" (or "worker 1" without an address), for messages.
  std::string Describe(Role role, int rank) const;

 private:
  struct Member {
    std::string address;
    std::string instance_id;
    absl::Time registered;
    // Meaningful once `heard` is set.
    absl::Time last_heartbeat;
    bool heard = false;
  };

  // Members of `role`, indexed by rank; nullptr for an invalid role.
  std::vector<Member>* MembersOf(Role role);
  const std::vector<Member>* MembersOf(Role role) const;
  int Capacity(Role role) const;

  const Options options_;
  std::vector<Member> servers_;
  std::vector<Member> workers_;
  int64_t epoch_ = 1;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_MEMBERSHIP_H_
