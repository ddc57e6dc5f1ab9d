// Barriers that wait longer than expected, and who they wait for.
//
// A barrier normally opens within a heartbeat or two of its first participant's arrival; one
// that waits much longer means a participant is slow, stuck or gone without being declared dead
// yet. FindStuckBarriers names the missing participants (with their addresses and how long ago
// they last heartbeated); StuckBarrierLog, fed on each watchdog tick, logs each stuck barrier
// once, again every `relog` while it stays stuck, and once when it opens, and keeps the latest
// for the run summary.
//
// Not thread-safe: the Scheduler guards both with its mutex.
#ifndef PSTRAIN_SCHEDULER_STUCK_BARRIERS_H_
#define PSTRAIN_SCHEDULER_STUCK_BARRIERS_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "scheduler/barrier.h"
#include "scheduler/status_json.h"

namespace pstrain {
namespace scheduler {

// Describes a barrier key ("worker 1") as a participant: role, rank, address, last heartbeat.
using DescribeParticipant = std::function<MissingParticipant(const std::string& key)>;

// The pending barriers first entered more than `after` before `now`, oldest name order kept, each
// with its missing participants; `created`: the scheduler's start, for since_seconds.
std::vector<StuckBarrierStatus> FindStuckBarriers(const std::vector<BarrierSet::Pending>& pending, absl::Time now,
                                                  absl::Time created, absl::Duration after,
                                                  const DescribeParticipant& describe);

// "barrier 'epoch 1' has waited 12.0 s for worker 1 at h:1 (last heartbeat 0.4 s ago), worker 2
// at h:2 (no heartbeat yet)".
std::string StuckBarrierLine(const StuckBarrierStatus& barrier);

class StuckBarrierLog {
 public:
  // Re-logs a barrier that stays stuck every `relog`; remembers at most `max_kept` barriers (the
  // oldest released ones go first).
  explicit StuckBarrierLog(absl::Duration relog = absl::Seconds(30), size_t max_kept = 50)
      : relog_(relog), max_kept_(max_kept) {}

  // The watchdog's tick: `stuck` is FindStuckBarriers' answer at `now`. Logs (WARNING) barriers
  // newly stuck, or stuck for another `relog` since they were last logged; marks barriers no
  // longer stuck as released (logged once, INFO).
  void Update(const std::vector<StuckBarrierStatus>& stuck, absl::Time now);

  // Every barrier that was ever stuck and is still remembered, by name: the still-stuck ones as of
  // the last Update and the released ones with their last missing participants.
  std::vector<StuckBarrierStatus> Kept() const;

 private:
  struct Entry {
    StuckBarrierStatus status;
    absl::Time logged;
    absl::Time released_at;  // meaningful once status.released
  };

  const absl::Duration relog_;
  const size_t max_kept_;
  std::map<std::string, Entry> entries_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_STUCK_BARRIERS_H_
