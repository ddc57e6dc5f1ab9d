// Who takes part in the job: registration, ranks, the live set, the cluster view and liveness.
//
// Ranks. Servers get ranks 0..num_servers-1 in order of registration; a server removed (the
// Scheduler removes a dead server only when it can replace it) leaves its rank vacant, and the next
// server to register takes the lowest vacant rank, also while the job runs. Worker ranks are never
// reused: each worker registration takes the next rank (registration order; at most num_workers
// live workers before the job runs, any number once it runs: a job may grow). So a rank names one
// process for the whole job, and a process that was declared dead while stopped (SIGSTOP, a network
// partition) and resumes is refused everywhere under its old rank instead of passing for its
// successor. A worker's slot is its position among the live workers sorted by rank (the view's
// `workers`).
// Registering the same (role, instance id) or the same non-empty (role, address) as a LIVE member
// again returns its rank, so a role may retry Register safely; a worker with neither cannot be told
// apart from another one and always gets a fresh rank. The same address with another instance id is
// another process (a server restarted at its old address): it is a new member, refused while the
// job's ranks are all live.
//
// The membership epoch starts at 1 (nobody registered) and is bumped by every change of the live
// set that changes a route: a registration, a death, a departure, and a new shard map. Servers
// compare the epoch a push was computed under with the current one, so it must change whenever
// the members a request may reach do. A server of a rank outside the shard map (one a pending
// scale-up admits, or one a scale-down drained) serves no request: its registration and departure
// bump no epoch, so they abort no SYNC step (a step recomputed after some servers applied it
// would be computed on their updated rows: docs/design/resharding.md). changes() counts every
// change of the live set, those too.
//
//   Register --> live --(Remove: died / left)--> gone (heartbeats refused; a worker's rank is never reused)
//
// Gone workers are remembered (their address for messages, their state for the dashboard), the
// newest kMaxGoneWorkers of them: a job that runs for months sees workers come and go without end,
// and the state, the summary and /api/status must stay bounded. A forgotten worker's rank stays
// used (ever_registered), and its calls are still refused.
//
// Liveness. Roles start heartbeating only once they are set up, so a live member is watched from
// its first heartbeat on: FindDead lists the live members whose last heartbeat is older than
// `dead_after`. Live members that registered but never heartbeated are "starting";
// FindNeverStarted lists those registered longer ago than a start-up limit. Removed members are
// never listed again. The caller decides what a death means (the Scheduler: a dead worker is
// removed; a dead server fails the job, or is removed and replaced in SYNC mode with checkpoints).
//
// Once the job runs, every change of the live set, servers and workers, is kept as a
// MembershipEvent (joins after the start, deaths, departures), for the run summary.
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_MEMBERSHIP_H_
#define PSTRAIN_SCHEDULER_MEMBERSHIP_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler_state.pb.h"
#include "scheduler/status_json.h"

namespace pstrain {
namespace scheduler {

// "server" or "worker".
std::string RoleName(Role role);

// How a member came or went.
enum class ChangeKind { kJoined, kDied, kLeft };
// "joined", "died", "left".
const char* ChangeKindName(ChangeKind kind);

struct MembershipEvent {
  absl::Time at;
  Role role = ROLE_UNSPECIFIED;
  int rank = 0;
  ChangeKind kind = ChangeKind::kJoined;
  // The membership epoch the change led to.
  int64_t epoch = 0;
};

// A live member found silent by FindDead or FindNeverStarted.
struct SilentMember {
  Role role = ROLE_UNSPECIFIED;
  int rank = 0;
  // e.g. "worker 1 at 127.0.0.1:4567 sent no heartbeat for 3.2 s".
  std::string message;
};

class Membership {
 public:
  struct Options {
    int num_servers = 1;
    int num_workers = 1;
    // While the job runs, a worker registering when this many are live is refused
    // (JobSpec.max_workers); 0: no bound beyond num_workers before the start.
    int max_workers = 0;
    // While the job runs, a worker registering when this many workers joined in the last minute
    // is refused (RESOURCE_EXHAUSTED): a member that joins and leaves in a loop bumps the
    // membership epoch, and so aborts the SYNC step, each time. 0: no limit.
    int max_joins_per_minute = 0;
    // The view's SYNC global batch (JobSpec.global_batch), whatever the live set.
    int64_t global_batch = 1;
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
  // `now` and returns its rank (see the ranks above). INVALID_ARGUMENT for a role other than SERVER
  // or WORKER, or a server without an address; FAILED_PRECONDITION "job already has 2 workers" when
  // every slot of the role is taken by another process (servers: no rank is vacant; workers: only
  // before the job runs); PERMISSION_DENIED for a worker joining a running job that already has
  // max_workers live workers; RESOURCE_EXHAUSTED ("... try again in 12s") for one that would be the
  // (max_joins_per_minute + 1)th worker to join the running job within a minute (retries of a live
  // member's registration do not count). `local`: a server's unix-socket endpoint for workers on its host
  // (ServerInfo.local in the view); kept only for servers, the only role peers dial.
  absl::StatusOr<int> Register(Role role, const std::string& address, const std::string& instance_id, absl::Time now,
                               const LocalEndpoint& local = LocalEndpoint());
  // The same without an instance id.
  absl::StatusOr<int> Register(Role role, const std::string& address, absl::Time now) {
    return Register(role, address, "", now);
  }

  // The rank Register would return again for a live member with this instance id or non-empty
  // address; nullopt when there is none (Register would add a member).
  std::optional<int> Lookup(Role role, const std::string& address, const std::string& instance_id) const;

  // Removes the live member (role, rank) because it died or left at `now`, and bumps the epoch.
  // Returns true when it was live, false when it was already removed (nothing changes).
  // FAILED_PRECONDITION when (role, rank) never registered; INVALID_ARGUMENT for kind kJoined.
  absl::StatusOr<bool> Remove(Role role, int rank, ChangeKind kind, absl::Time now);

  // Records a heartbeat; from now on the member is watched. FAILED_PRECONDITION when (role, rank)
  // never registered, or "worker 1 is no longer a member ..." when it was removed.
  absl::Status Heartbeat(Role role, int rank, absl::Time now);

  // Records where the live member (role, rank) serves Prometheus metrics ("host:port"; empty:
  // nowhere). Kept with the member (and its state) until another process takes the rank. Does
  // nothing for an unknown member.
  void SetMetricsAddress(Role role, int rank, const std::string& metrics_address);

  // Every member that ever registered but the forgotten workers, servers then workers by rank, with state "live",
  // "dead" (died) or "left", for the dashboard; times count from `created`.
  std::vector<MemberStatus> Members(absl::Time now, absl::Time created) const;

  // The model's part of the view (Options: shard_map, train_samples, test_samples, total_steps),
  // set when it becomes known after construction: an external model's declaration.
  void SetModel(ShardMap shard_map, int64_t train_samples, int64_t test_samples, int64_t total_steps);
  // The number of server ranks (Options::num_servers) from now on: servers register up to that
  // many (a job growing its server count admits the added ranks before it cuts over). Live servers
  // of higher ranks stay members until they leave (drained by a scale-down).
  void SetServerSlots(int num_servers) { options_.num_servers = num_servers; }
  int server_slots() const { return options_.num_servers; }
  // The view's shard map from now on (the job changed its server count), with a bumped epoch:
  // every request routed under the old map is refused.
  void ChangeShardMap(ShardMap shard_map);
  const ShardMap& shard_map() const { return options_.shard_map; }
  // A data stream's newly ready records: the view's train_samples and total_steps grow (the
  // membership epoch does not change: no member did).
  void GrowData(int64_t train_samples, int64_t total_steps);

  // True once every configured server and worker has registered; stays true (the job runs) when
  // workers leave later.
  bool running() const { return running_; }
  int num_live(Role role) const;
  // Live ranks of `role`, ascending.
  std::vector<int> LiveRanks(Role role) const;
  bool is_live(Role role, int rank) const;
  // True when (role, rank) registered at some time, live or not.
  bool ever_registered(Role role, int rank) const;
  // The instance id of the process that registered last at (role, rank), live or not; nullopt when
  // none ever did.
  std::optional<std::string> InstanceOf(Role role, int rank) const;
  int64_t epoch() const { return epoch_; }
  // Changes of the live set so far (registrations and removals, whether or not they bumped the
  // epoch): a caller tells a new member from a retried registration, and a tick that changed
  // something, by it. Not persistent.
  int64_t changes() const { return changes_; }
  const std::vector<MembershipEvent>& events() const { return events_; }
  // The events kept: the newest, at most this many (the state, the summary and /api/status list
  // them).
  static constexpr size_t kMaxEvents = 1000;
  // The gone workers remembered: the newest (highest ranks), at most this many.
  static constexpr int kMaxGoneWorkers = 256;
  // Gone workers forgotten so far (Members lists the others).
  int64_t forgotten_workers() const { return forgotten_workers_; }
  // True for a worker rank that was handed out and whose member was forgotten since.
  bool forgotten(Role role, int rank) const {
    return role == WORKER && ever_registered(role, rank) && Find(role, rank) == nullptr;
  }

  // The view: epoch, WAITING_FOR_ROLES or RUNNING (the caller overrides the state once the job
  // has ended), live servers and workers sorted by rank, shard map, sample counts, total steps and
  // the global batch.
  ClusterView View() const;

  // Every live member that has heartbeated and then been silent for longer than dead_after at
  // `now`. Empty when all are alive.
  std::vector<SilentMember> FindDead(absl::Time now) const;

  // Every live member that registered more than `limit` before `now` and has not heartbeated since,
  // e.g. "server 0 at 127.0.0.1:4001 sent no heartbeat in the 300.0 s since it registered".
  std::vector<SilentMember> FindNeverStarted(absl::Time now, absl::Duration limit) const;

  // How long before `now` (role, rank) last heartbeated; nullopt when it never did or never
  // registered.
  std::optional<absl::Duration> SinceHeartbeat(Role role, int rank, absl::Time now) const;

  // True when every live server has heartbeated at or after `t` (true with no servers).
  bool AllServersHeardSince(absl::Time t) const;

  // "worker 1 at 127.0.0.1:4567" (or "worker 1" without an address), for messages; also for a
  // removed member (its last address).
  std::string Describe(Role role, int rank) const;

  // The persistent part (proto/scheduler_state.proto, defined in scheduler/snapshot.cc): members,
  // epoch, events and the shard map; not when members last heartbeated.
  MembershipState ToProto() const;
  // Replaces the members, epoch and events with `state` (a restarted scheduler; the shard map is
  // the Options'). Every live member that had heartbeated is watched afresh from `now`: it has
  // dead_after from the restart to heartbeat again. Live servers of ranks beyond the shard map
  // are kept (a pending scale-up admitted them, or a scale-down drained them and they have not
  // left yet). INVALID_ARGUMENT, changing nothing, for a state that does not fit (a rank listed
  // twice or negative, an unknown change kind).
  absl::Status Restore(const MembershipState& state, absl::Time now);

 private:
  struct Member {
    std::string address;
    std::string instance_id;
    LocalEndpoint local;  // servers: the unix socket beside `address`, if any
    absl::Time registered;
    // Meaningful once `heard` is set.
    absl::Time last_heartbeat;
    bool heard = false;
    bool live = true;
    // Why it is gone, once !live.
    ChangeKind removed = ChangeKind::kDied;
    // RegisterRequest.metrics_address; empty: none.
    std::string metrics_address;
  };

  // Members of `role` by rank (removed ones too, but the forgotten workers; a server's vacant rank
  // is refilled); nullptr for an invalid role.
  std::map<int, Member>* MembersOf(Role role);
  const std::map<int, Member>* MembersOf(Role role) const;
  // The member (role, rank), or nullptr when there is none (never registered, or forgotten).
  Member* Find(Role role, int rank);
  const Member* Find(Role role, int rank) const;
  void Record(Role role, int rank, ChangeKind kind, absl::Time now);
  // Forgets the oldest gone workers beyond kMaxGoneWorkers.
  void ForgetOldGoneWorkers();
  // A change of the live set: bumps changes_, and the epoch unless (role, rank) is a server
  // outside the shard map.
  void Changed(Role role, int rank);

  Options options_;  // constant but for SetModel
  std::map<int, Member> servers_;
  std::map<int, Member> workers_;
  // The rank the next worker gets: every worker rank below it was handed out once.
  int next_worker_rank_ = 0;
  int64_t forgotten_workers_ = 0;
  int64_t epoch_ = 1;
  int64_t changes_ = 0;
  // Servers in the shard map: ranks 0..map_servers_-1 (Options::num_servers at first, then each
  // ChangeShardMap's count).
  int map_servers_ = 0;
  bool running_ = false;
  std::vector<MembershipEvent> events_;
  // When workers joined the running job, within the last minute (max_joins_per_minute); not
  // persisted: a restarted scheduler starts a fresh minute.
  std::deque<absl::Time> recent_joins_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_MEMBERSHIP_H_
