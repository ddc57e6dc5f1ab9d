#include "scheduler/membership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/server_counts.h"

namespace pstrain {
namespace scheduler {

std::string RoleName(Role role) {
  switch (role) {
    case SERVER:
      return "server";
    case WORKER:
      return "worker";
    default:
      return absl::StrCat("role ", static_cast<int>(role));
  }
}

const char* ChangeKindName(ChangeKind kind) {
  switch (kind) {
    case ChangeKind::kJoined:
      return "joined";
    case ChangeKind::kDied:
      return "died";
    case ChangeKind::kLeft:
      return "left";
  }
  return "?";
}

Membership::Membership(Options options) : options_(std::move(options)), map_servers_(options_.num_servers) {}

void Membership::Changed(Role role, int rank) {
  ++changes_;
  if (role != SERVER || rank < map_servers_) ++epoch_;
}

std::map<int, Membership::Member>* Membership::MembersOf(Role role) {
  return const_cast<std::map<int, Member>*>(static_cast<const Membership*>(this)->MembersOf(role));
}

const std::map<int, Membership::Member>* Membership::MembersOf(Role role) const {
  switch (role) {
    case SERVER:
      return &servers_;
    case WORKER:
      return &workers_;
    default:
      return nullptr;
  }
}

Membership::Member* Membership::Find(Role role, int rank) {
  return const_cast<Member*>(static_cast<const Membership*>(this)->Find(role, rank));
}

const Membership::Member* Membership::Find(Role role, int rank) const {
  const std::map<int, Member>* members = MembersOf(role);
  if (members == nullptr) return nullptr;
  auto it = members->find(rank);
  return it == members->end() ? nullptr : &it->second;
}

void Membership::ForgetOldGoneWorkers() {
  int gone = static_cast<int>(workers_.size()) - num_live(WORKER);
  for (auto it = workers_.begin(); gone > kMaxGoneWorkers && it != workers_.end();) {
    if (it->second.live) {
      ++it;
      continue;
    }
    it = workers_.erase(it);
    --gone;
    ++forgotten_workers_;
  }
}

void Membership::Record(Role role, int rank, ChangeKind kind, absl::Time now) {
  events_.push_back(MembershipEvent{now, role, rank, kind, epoch_});
  // Members can join and leave without end: the oldest events go, a tenth at a time.
  if (events_.size() > kMaxEvents) events_.erase(events_.begin(), events_.begin() + kMaxEvents / 10);
}

std::optional<std::string> Membership::InstanceOf(Role role, int rank) const {
  const Member* m = Find(role, rank);
  if (m == nullptr) return std::nullopt;
  return m->instance_id;
}

std::optional<int> Membership::Lookup(Role role, const std::string& address, const std::string& instance_id) const {
  const std::map<int, Member>* members = MembersOf(role);
  if (members == nullptr) return std::nullopt;
  for (const auto& [rank, m] : *members) {
    if (!m.live) continue;
    if (!instance_id.empty() && m.instance_id == instance_id) return rank;
    // The same address is the same process only when neither says otherwise: a server restarted
    // in its pod (same IP and port) before its predecessor was declared dead is another process,
    // which must wait for the rank rather than take over the dead one's session.
    const bool other_process = !instance_id.empty() && !m.instance_id.empty() && m.instance_id != instance_id;
    if (!address.empty() && m.address == address && !other_process) return rank;
  }
  return std::nullopt;
}

absl::StatusOr<int> Membership::Register(Role role, const std::string& address, const std::string& instance_id,
                                         absl::Time now, const LocalEndpoint& local) {
  std::map<int, Member>* members = MembersOf(role);
  if (members == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("register: got ", RoleName(role), ", expected server or worker"));
  }
  if (role == SERVER && address.empty()) {
    return absl::InvalidArgumentError("register server: empty address, expected host:port");
  }
  if (std::optional<int> rank = Lookup(role, address, instance_id); rank.has_value()) return *rank;
  // Servers take the lowest vacant rank (a removed server's), so their ranks stay 0..n-1.
  const int capacity = role == SERVER ? options_.num_servers : options_.num_workers;
  const bool bounded = role == SERVER || !running_;
  // A server's rank is the lowest vacant one, which must be within the job's count: a drained
  // server outside the map (a scale-down, still serving its checkpoints) takes no place from a
  // replacement for a dead one.
  int lowest_vacant = 0;
  while (is_live(SERVER, lowest_vacant)) ++lowest_vacant;
  const bool full = role == SERVER ? lowest_vacant >= capacity : num_live(role) >= capacity;
  if (bounded && full) {
    return absl::FailedPreconditionError(absl::StrCat("register ", RoleName(role), " at '", address,
                                                      "': job already has ", capacity, " ", RoleName(role), "s"));
  }
  if (role == WORKER && running_ && options_.max_workers > 0 && num_live(WORKER) >= options_.max_workers) {
    return absl::PermissionDeniedError(
        absl::StrCat("register worker at '", address, "': the job admits at most ", options_.max_workers,
                     " live workers (--max_workers, or --workers + --spare_workers) and has ", num_live(WORKER)));
  }
  if (role == WORKER && running_ && options_.max_joins_per_minute > 0) {
    while (!recent_joins_.empty() && recent_joins_.front() <= now - absl::Minutes(1)) recent_joins_.pop_front();
    if (static_cast<int>(recent_joins_.size()) >= options_.max_joins_per_minute) {
      const absl::Duration wait = absl::Ceil(recent_joins_.front() + absl::Minutes(1) - now, absl::Seconds(1));
      return absl::ResourceExhaustedError(absl::StrCat(
          "register worker at '", address, "': ", recent_joins_.size(),
          " workers joined the running job in the last minute, and the job admits at most ",
          options_.max_joins_per_minute, " a minute (twice its most live workers, at least 10); try again in ",
          absl::FormatDuration(wait)));
    }
  }
  // Servers fill the lowest vacant rank. A worker always gets a rank never used before: a stopped
  // process that was declared dead (SIGSTOP, a partition) and comes back must not pass for the new
  // worker under its old rank, and with fresh ranks every request it makes names a removed member.
  int rank = 0;
  if (role == SERVER) {
    rank = lowest_vacant;
  } else {
    rank = next_worker_rank_++;
  }
  (*members)[rank] =
      Member{address, instance_id, role == SERVER ? local : LocalEndpoint(), now, now, false, true, ChangeKind::kDied};
  Changed(role, rank);
  if (running_) {
    Record(role, rank, ChangeKind::kJoined, now);
    if (role == WORKER) recent_joins_.push_back(now);
  } else if (num_live(SERVER) == options_.num_servers && num_live(WORKER) == options_.num_workers) {
    running_ = true;
  }
  return rank;
}

void Membership::ChangeShardMap(ShardMap shard_map) {
  map_servers_ = ServersOfMap(shard_map, map_servers_);
  options_.shard_map = std::move(shard_map);
  ++epoch_;
}

absl::StatusOr<bool> Membership::Remove(Role role, int rank, ChangeKind kind, absl::Time now) {
  if (kind == ChangeKind::kJoined) {
    return absl::InvalidArgumentError(
        absl::StrCat("remove ", RoleName(role), " ", rank, ": got kind 'joined', expected 'died' or 'left'"));
  }
  if (!ever_registered(role, rank)) {
    return absl::FailedPreconditionError(absl::StrCat("remove ", RoleName(role), " ", rank, ": not registered"));
  }
  Member* m = Find(role, rank);
  if (m == nullptr || !m->live) return false;  // Gone (and perhaps forgotten) already.
  m->live = false;
  m->removed = kind;
  Changed(role, rank);
  Record(role, rank, kind, now);
  if (role == WORKER) ForgetOldGoneWorkers();
  return true;
}

absl::Status Membership::Heartbeat(Role role, int rank, absl::Time now) {
  if (!ever_registered(role, rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("heartbeat from ", RoleName(role), " ", rank, ": not registered (", num_live(role), " live)"));
  }
  Member* found = Find(role, rank);
  if (found == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(RoleName(role), " ", rank,
                                                      " is no longer a member of the job: it left or died long ago "
                                                      "(membership epoch ",
                                                      epoch_, ")"));
  }
  Member& m = *found;
  if (!m.live) {
    return absl::FailedPreconditionError(absl::StrCat(
        RoleName(role), " ", rank, " is no longer a member of the job: it ",
        m.removed == ChangeKind::kLeft ? "left" : "was declared dead", " (membership epoch ", epoch_, ")"));
  }
  m.last_heartbeat = now;
  m.heard = true;
  return absl::OkStatus();
}

int Membership::num_live(Role role) const {
  const std::map<int, Member>* members = MembersOf(role);
  if (members == nullptr) return 0;
  int live = 0;
  for (const auto& [rank, m] : *members) live += m.live ? 1 : 0;
  return live;
}

std::vector<int> Membership::LiveRanks(Role role) const {
  std::vector<int> ranks;
  const std::map<int, Member>* members = MembersOf(role);
  if (members == nullptr) return ranks;
  for (const auto& [rank, m] : *members) {
    if (m.live) ranks.push_back(rank);
  }
  return ranks;
}

bool Membership::ever_registered(Role role, int rank) const {
  if (role == WORKER) return rank >= 0 && rank < next_worker_rank_;
  return Find(role, rank) != nullptr;
}

bool Membership::is_live(Role role, int rank) const {
  const Member* m = Find(role, rank);
  return m != nullptr && m->live;
}

void Membership::SetModel(ShardMap shard_map, int64_t train_samples, int64_t test_samples, int64_t total_steps) {
  options_.shard_map = std::move(shard_map);
  options_.train_samples = train_samples;
  options_.test_samples = test_samples;
  options_.total_steps = total_steps;
}

void Membership::GrowData(int64_t train_samples, int64_t total_steps) {
  options_.train_samples = train_samples;
  options_.total_steps = total_steps;
}

ClusterView Membership::View() const {
  ClusterView view;
  view.set_membership_epoch(epoch_);
  view.set_state(running_ ? RUNNING : WAITING_FOR_ROLES);
  for (int rank : LiveRanks(SERVER)) {
    ServerInfo* info = view.add_servers();
    info->set_rank(rank);
    const Member& m = servers_.at(rank);
    info->set_address(m.address);
    if (!m.local.unix_address().empty()) *info->mutable_local() = m.local;
  }
  for (int rank : LiveRanks(WORKER)) {
    WorkerInfo* info = view.add_workers();
    info->set_rank(rank);
    info->set_address(workers_.at(rank).address);
  }
  *view.mutable_shard_map() = options_.shard_map;
  view.set_train_samples(options_.train_samples);
  view.set_test_samples(options_.test_samples);
  view.set_total_steps(options_.total_steps);
  view.set_global_batch(options_.global_batch);
  return view;
}

std::vector<SilentMember> Membership::FindDead(absl::Time now) const {
  std::vector<SilentMember> dead;
  for (Role role : {SERVER, WORKER}) {
    for (const auto& [rank, m] : *MembersOf(role)) {
      if (!m.live || !m.heard) continue;
      const absl::Duration silent = now - m.last_heartbeat;
      if (silent > options_.dead_after) {
        dead.push_back(
            {role, rank,
             absl::StrFormat("%s sent no heartbeat for %.1f s", Describe(role, rank), absl::ToDoubleSeconds(silent))});
      }
    }
  }
  return dead;
}

std::vector<SilentMember> Membership::FindNeverStarted(absl::Time now, absl::Duration limit) const {
  std::vector<SilentMember> silent;
  for (Role role : {SERVER, WORKER}) {
    for (const auto& [rank, m] : *MembersOf(role)) {
      if (!m.live || m.heard || now - m.registered <= limit) continue;
      silent.push_back({role, rank,
                        absl::StrFormat("%s sent no heartbeat in the %.1f s since it registered", Describe(role, rank),
                                        absl::ToDoubleSeconds(now - m.registered))});
    }
  }
  return silent;
}

std::optional<absl::Duration> Membership::SinceHeartbeat(Role role, int rank, absl::Time now) const {
  const Member* m = Find(role, rank);
  if (m == nullptr || !m->heard) return std::nullopt;
  return now - m->last_heartbeat;
}

bool Membership::AllServersHeardSince(absl::Time t) const {
  for (const auto& [rank, m] : servers_) {
    if (m.live && (!m.heard || m.last_heartbeat < t)) return false;
  }
  return true;
}

std::string Membership::Describe(Role role, int rank) const {
  std::string text = absl::StrCat(RoleName(role), " ", rank);
  const Member* m = Find(role, rank);
  if (m != nullptr && !m->address.empty()) absl::StrAppend(&text, " at ", m->address);
  return text;
}

void Membership::SetMetricsAddress(Role role, int rank, const std::string& metrics_address) {
  Member* m = Find(role, rank);
  if (m != nullptr) m->metrics_address = metrics_address;
}

std::vector<MemberStatus> Membership::Members(absl::Time now, absl::Time created) const {
  std::vector<MemberStatus> out;
  for (Role role : {SERVER, WORKER}) {
    for (const auto& [rank, m] : *MembersOf(role)) {
      MemberStatus status;
      status.role = RoleName(role);
      status.rank = rank;
      status.address = m.address;
      status.metrics_address = m.metrics_address;
      status.state = m.live ? "live" : (m.removed == ChangeKind::kLeft ? "left" : "dead");
      if (m.heard) status.last_heartbeat_seconds_ago = absl::ToDoubleSeconds(now - m.last_heartbeat);
      status.joined_seconds = absl::ToDoubleSeconds(m.registered - created);
      out.push_back(std::move(status));
    }
  }
  return out;
}

}  // namespace scheduler
}  // namespace pstrain
