#include "scheduler/barrier.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace scheduler {

void BarrierSet::MaybeRelease(Barrier* barrier, Answers* out) {
  if (barrier->released || !barrier->awaited.has_value()) return;
  for (const std::string& key : *barrier->awaited) {
    if (!barrier->entered.contains(key)) return;
  }
  barrier->released = true;
  for (Done& done : barrier->parked) out->push_back({std::move(done), absl::OkStatus()});
  barrier->parked.clear();
}

void BarrierSet::SetParticipants(Group group, const std::vector<std::string>& keys, Answers* out) {
  absl::flat_hash_set<std::string>& now = participants_[group];
  now = absl::flat_hash_set<std::string>(keys.begin(), keys.end());
  for (auto& [name, barrier] : barriers_) {
    if (barrier.group != group || barrier.released) continue;
    if (!barrier.awaited.has_value()) {
      barrier.awaited = now;
    } else {
      absl::erase_if(*barrier.awaited, [&now](const std::string& key) { return !now.contains(key); });
    }
    MaybeRelease(&barrier, out);
  }
}

void BarrierSet::Enter(const std::string& name, Group group, const std::string& key, Done done, Answers* out,
                       absl::Time now) {
  if (!failure_.ok()) {
    out->push_back({std::move(done), failure_});
    return;
  }
  auto [it, created] = barriers_.try_emplace(name);
  Barrier& barrier = it->second;
  if (created) {
    barrier.group = group;
    barrier.since = now;
    if (auto known = participants_.find(group); known != participants_.end()) barrier.awaited = known->second;
  }
  if (barrier.group != group) {
    out->push_back(
        {std::move(done), absl::InvalidArgumentError(absl::StrCat(
                              "barrier '", name, "' entered by ", key, " for ",
                              BarrierRequest::Participants_Name(group), " participants, expected ",
                              BarrierRequest::Participants_Name(barrier.group), " as its first participant said"))});
    return;
  }
  if (barrier.released) {
    out->push_back({std::move(done), absl::OkStatus()});
    return;
  }
  barrier.entered.insert(key);
  barrier.parked.push_back(std::move(done));
  MaybeRelease(&barrier, out);
}

void BarrierSet::FailAll(absl::Status status, Answers* out) {
  if (failure_.ok()) failure_ = std::move(status);
  for (auto& [name, barrier] : barriers_) {
    for (Done& done : barrier.parked) out->push_back({std::move(done), failure_});
    barrier.parked.clear();
  }
}

std::vector<BarrierSet::Pending> BarrierSet::PendingBarriers() const {
  std::vector<Pending> out;
  for (const auto& [name, barrier] : barriers_) {
    if (barrier.released || barrier.parked.empty() || !barrier.awaited.has_value()) continue;
    Pending pending{name, barrier.since, {}};
    for (const std::string& key : *barrier.awaited) {
      if (!barrier.entered.contains(key)) pending.missing.push_back(key);
    }
    std::sort(pending.missing.begin(), pending.missing.end());
    out.push_back(std::move(pending));
  }
  std::sort(out.begin(), out.end(), [](const Pending& a, const Pending& b) { return a.name < b.name; });
  return out;
}

int BarrierSet::num_pending() const {
  int pending = 0;
  for (const auto& [name, barrier] : barriers_) pending += barrier.parked.empty() ? 0 : 1;
  return pending;
}

void RunAnswers(BarrierSet::Answers answers) {
  for (BarrierSet::Answer& answer : answers) answer.done(std::move(answer.status));
}

}  // namespace scheduler
}  // namespace pstrain
