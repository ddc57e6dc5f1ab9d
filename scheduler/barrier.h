// Named one-shot barriers that follow the live set.
//
// Each barrier belongs to a group of participants (WORKERS or ALL), whose live members the owner
// publishes with SetParticipants on every membership change. A barrier waits for the members of
// its group that were live when it was created (its first Enter, or the first SetParticipants
// after that if the group was not published yet) and are still live: a participant that dies or
// leaves is no longer waited for, and one that joins later is not waited for (it may still enter,
// and is answered with the others). When every awaited participant has entered, every parked
// callback is answered OK and the barrier stays released: a later Enter of the same name (a retry
// whose answer was lost, a late joiner) is answered OK at once. The same key entering twice counts
// once, and both of its callbacks are answered.
//
//   Enter(w0) -> parked   Enter(w1) -> parked   SetParticipants({w0, w1})  [w2 died]
//     -> released: w0, w1 get OK
//
// FailAll(status) answers every parked callback with `status` and every later Enter too (the job
// has ended; nothing will release them).
//
// Not thread-safe: the Scheduler guards it with its mutex. No callback runs inside a call: each
// call appends the callbacks to answer, with their status, to `out`, and the caller runs them
// (RunAnswers) after releasing its lock, so they may call back in.
#ifndef PSTRAIN_SCHEDULER_BARRIER_H_
#define PSTRAIN_SCHEDULER_BARRIER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

class BarrierSet {
 public:
  using Done = std::function<void(absl::Status)>;
  using Group = BarrierRequest::Participants;
  // A parked callback and what to answer it.
  struct Answer {
    Done done;
    absl::Status status;
  };
  using Answers = std::vector<Answer>;

  BarrierSet() = default;
  BarrierSet(const BarrierSet&) = delete;
  BarrierSet& operator=(const BarrierSet&) = delete;

  // The live participants (keys, e.g. "worker 1") of `group` from now on. Pending barriers of the
  // group stop waiting for keys not in `keys`; those that thereby have everyone are released.
  void SetParticipants(Group group, const std::vector<std::string>& keys, Answers* out);

  // Enters participant `key` into barrier `name` of `group`. `done` is answered exactly once: OK on
  // release; INVALID_ARGUMENT at once when the barrier was created for another group; the FailAll
  // status when the set has failed. `now`: when, kept as the barrier's start by its first Enter
  // (see Pending).
  void Enter(const std::string& name, Group group, const std::string& key, Done done, Answers* out,
             absl::Time now = absl::InfinitePast());

  // A barrier that is waiting: first entered at `since`, still missing the `missing` keys (sorted).
  struct Pending {
    std::string name;
    absl::Time since;
    std::vector<std::string> missing;
  };
  // The barriers with parked callbacks whose participants are known, sorted by name.
  std::vector<Pending> PendingBarriers() const;

  // Answers every parked callback, and every later Enter, with `status` (not OK). Idempotent: the
  // first status stays.
  void FailAll(absl::Status status, Answers* out);

  // Number of barriers with parked callbacks. For tests.
  int num_pending() const;

  // The released barriers, sorted by name (scheduler/snapshot.cc). Pending ones are not kept: their
  // callers enter again.
  std::vector<BarrierState> Released() const;
  // Forgets every barrier (REQUIRES: none parked) and marks `released` as released: entering one of
  // them is answered OK at once. Participants are published afresh with SetParticipants.
  void RestoreReleased(const std::vector<BarrierState>& released);

 private:
  struct Barrier {
    Group group = BarrierRequest::WORKERS;
    bool released = false;
    // Who it waits for; unset until the group's participants are known.
    std::optional<absl::flat_hash_set<std::string>> awaited;
    absl::flat_hash_set<std::string> entered;
    std::vector<Done> parked;
    absl::Time since = absl::InfinitePast();
  };

  // Releases `barrier` if every awaited participant has entered.
  static void MaybeRelease(Barrier* barrier, Answers* out);

  absl::flat_hash_map<std::string, Barrier> barriers_;
  absl::flat_hash_map<int, absl::flat_hash_set<std::string>> participants_;
  absl::Status failure_;
};

// Runs every answer. Call without the lock that guards the BarrierSet.
void RunAnswers(BarrierSet::Answers answers);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_BARRIER_H_
