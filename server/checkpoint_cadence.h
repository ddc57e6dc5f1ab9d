// Which checkpoint cuts write a whole shard (a base) and which a delta on the cut before
// (JobSpec.full_checkpoint_every; server/checkpoint_chain.h).
//
// A cut is a delta when the job asks for deltas, fewer than full_checkpoint_every - 1 deltas
// followed the last base, the storages can write one (no table lost tombstones since the last
// cut), and the previous cut's file was written. The last rule keeps every chain on disk whole: a
// cut whose write failed or was skipped (a rollback since), or is still being written when the next
// cut comes, is followed by a base. After a restore (a rollback, or the initial state) the next cut
// is a base too, so a chain never spans a rollback.
//
// Thread safety: Plan and Restored under the store's mutex; Written from the thread that wrote the
// file, under the store's write mutex only (it is an atomic).
#ifndef PSTRAIN_SERVER_CHECKPOINT_CADENCE_H_
#define PSTRAIN_SERVER_CHECKPOINT_CADENCE_H_

#include <atomic>
#include <cstdint>

namespace pstrain::server {

class CheckpointCadence {
 public:
  // full_every: JobSpec.full_checkpoint_every (0 or 1: every cut whole).
  explicit CheckpointCadence(int full_every) : full_every_(full_every) {}

  // A cut at step `step`: the step of the cut a delta would follow, or -1 for a whole checkpoint.
  // `storages_can`: every storage can write a delta now (ShardStorage::CanSaveDelta).
  int64_t Plan(int64_t step, bool storages_can) {
    const bool delta =
        full_every_ > 1 && deltas_ + 1 < full_every_ && storages_can && last_cut_ >= 0 && written_.load() == last_cut_;
    const int64_t base = delta ? last_cut_ : -1;
    deltas_ = delta ? deltas_ + 1 : 0;
    last_cut_ = step;
    return base;
  }
  // The file of the cut at `step` was written.
  void Written(int64_t step) { written_.store(step); }
  // The store was restored (from a checkpoint or to its initial state): the next cut is a base.
  void Restored() {
    last_cut_ = -1;
    deltas_ = 0;
    written_.store(-1);
  }
  // Whether the job writes deltas at all.
  bool deltas_on() const { return full_every_ > 1; }

 private:
  const int full_every_;
  int64_t last_cut_ = -1;             // the step of the latest cut; -1: none since creation or a restore
  int deltas_ = 0;                    // deltas since the latest base
  std::atomic<int64_t> written_{-1};  // the step of the latest cut whose file was written
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_CHECKPOINT_CADENCE_H_
