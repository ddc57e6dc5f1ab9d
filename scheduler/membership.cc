#include "scheduler/membership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pstrain {
namespace scheduler {

std::string RoleName(Role role) {
  switch (role) {
    case SERVER: return "server";
    case WORKER: return "worker";
    default: return absl::StrCat("role ", static_cast<int>(role));
  }
}

Membership::Membership(Options options) : options_(std::move(options)) {}

std::vector<Membership::Member>* Membership::MembersOf(Role role) {
  return const_cast<std::vector<Member>*>(static_cast<const Membership*>(this)->MembersOf(role));
}

const std::vector<Membership::Member>* Membership::MembersOf(Role role) const {
  switch (role) {
    case SERVER: return &servers_;
    case WORKER: return &workers_;
    default: return nullptr;
  }
}

int Membership::Capacity(Role role) const {
  return role == SERVER ? options_.num_servers : options_.num_workers;
}

absl::StatusOr<int> Membership::Register(Role role, const std::string& address,
                                         const std::string& instance_id, absl::Time now) {
  std::vector<Member>* members = MembersOf(role);
  if (members == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("register: got ", RoleName(role),
                                                   ", expected server or worker"));
  }
  if (role == SERVER && address.empty()) {
    return absl::InvalidArgumentError("register server: empty address, expected host:port");
  }
  for (int rank = 0; rank < static_cast<int>(members->size()); ++rank) {
    const Member& m = (*members)[rank];
    if (!instance_id.empty() && m.instance_id == instance_id) return rank;
    if (!address.empty() && m.address == address) return rank;
  }
  if (static_cast<int>(members->size()) >= Capacity(role)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "register ", RoleName(role), " at '", address, "': job already has ", Capacity(role), " ",
        RoleName(role), "s"));
  }
  members->push_back(Member{address, instance_id, now, now, false});
  ++epoch_;
  return static_cast<int>(members->size()) - 1;
}

absl::Status Membership::Heartbeat(Role role, int rank, absl::Time now) {
  std::vector<Member>* members = MembersOf(role);
  if (members == nullptr || rank < 0 || rank >= static_cast<int>(members->size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("heartbeat from ", RoleName(role), " ", rank, ": not registered (",
                     members == nullptr ? 0 : members->size(), " registered)"));
  }
  (*members)[rank].last_heartbeat = now;
  (*members)[rank].heard = true;
  return absl::OkStatus();
}

bool Membership::complete() const {
  return static_cast<int>(servers_.size()) == options_.num_servers &&
         static_cast<int>(workers_.size()) == options_.num_workers;
}

int Membership::num_registered(Role role) const {
  const std::vector<Member>* members = MembersOf(role);
  return members == nullptr ? 0 : static_cast<int>(members->size());
}

ClusterView Membership::View() const {
  ClusterView view;
  view.set_membership_epoch(epoch_);
  view.set_state(complete() ? RUNNING : WAITING_FOR_ROLES);
  for (int rank = 0; rank < static_cast<int>(servers_.size()); ++rank) {
    ServerInfo* info = view.add_servers();
    info->set_rank(rank);
    info->set_address(servers_[rank].address);
  }
  for (int rank = 0; rank < static_cast<int>(workers_.size()); ++rank) {
    WorkerInfo* info = view.add_workers();
    info->set_rank(rank);
    info->set_address(workers_[rank].address);
  }
  *view.mutable_shard_map() = options_.shard_map;
  view.set_train_samples(options_.train_samples);
  view.set_test_samples(options_.test_samples);
  view.set_total_steps(options_.total_steps);
  return view;
}

std::vector<std::string> Membership::FindDead(absl::Time now) const {
  std::vector<std::string> dead;
  for (Role role : {SERVER, WORKER}) {
    const std::vector<Member>& members = *MembersOf(role);
    for (int rank = 0; rank < static_cast<int>(members.size()); ++rank) {
      if (!members[rank].heard) continue;
      const absl::Duration silent = now - members[rank].last_heartbeat;
      if (silent > options_.dead_after) {
        dead.push_back(absl::StrFormat("%s sent no heartbeat for %.1f s", Describe(role, rank),
                                       absl::ToDoubleSeconds(silent)));
      }
    }
  }
  return dead;
}

std::vector<std::string> Membership::FindNeverStarted(absl::Time now, absl::Duration limit) const {
  std::vector<std::string> silent;
  for (Role role : {SERVER, WORKER}) {
    const std::vector<Member>& members = *MembersOf(role);
    for (int rank = 0; rank < static_cast<int>(members.size()); ++rank) {
      if (members[rank].heard || now - members[rank].registered <= limit) continue;
      silent.push_back(absl::StrFormat("%s sent no heartbeat in the %.1f s since it registered",
                                       Describe(role, rank),
                                       absl::ToDoubleSeconds(now - members[rank].registered)));
    }
  }
  return silent;
}

bool Membership::AllServersHeardSince(absl::Time t) const {
  for (const Member& m : servers_) {
    if (!m.heard || m.last_heartbeat < t) return false;
  }
  return true;
}

std::string Membership::Describe(Role role, int rank) const {
  const std::vector<Member>* members = MembersOf(role);
  std::string text = absl::StrCat(RoleName(role), " ", rank);
  if (members != nullptr && rank >= 0 && rank < static_cast<int>(members->size()) &&
      !(*members)[rank].address.empty()) {
    absl::StrAppend(&text, " at ", (*members)[rank].address);
  }
  return text;
}

}  // namespace scheduler
}  // namespace pstrain
