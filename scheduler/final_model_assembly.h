// The job's final model, assembled from the servers' own shards once every live worker is done
// (see "The final model" in scheduler.h): which shards arrived, their values in the shard map's
// flat layout, and whether the model file was written.
//
// A shard is taken only whole and only when it matches the shard map: its chunks are the map's
// chunks of that shard, in the map's (tensor_id, offset) order, each of the right length, and every
// value is finite. Anything else is refused before a byte is copied. Who may send a shard (its
// primary server) is the caller's to check.
//
// The values are kept in memory only (a restarted scheduler asks the servers again); whether the
// model was written is part of the scheduler's saved state.
//
// Not thread-safe: the Scheduler guards it with its mutex.
#ifndef PSTRAIN_SCHEDULER_FINAL_MODEL_ASSEMBLY_H_
#define PSTRAIN_SCHEDULER_FINAL_MODEL_ASSEMBLY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler.pb.h"

namespace pstrain {
namespace scheduler {

class FinalModelAssembly {
 public:
  // A model of `num_shards` shards (the job's server count, > 0).
  explicit FinalModelAssembly(int num_shards);

  int num_shards() const { return num_shards_; }
  // Whether shard `shard` arrived; false for one out of range.
  bool Holds(int shard) const;
  // Whether every shard arrived.
  bool Complete() const;

  // INVALID_ARGUMENT "final shard 5 from server 1: no such shard, expected 0..1" for a shard index
  // out of range; OK otherwise.
  absl::Status CheckIndex(const FinalShard& shard) const;
  // Checks `shard` against `map` (above) and copies its values in; INVALID_ARGUMENT naming the
  // first mismatch (chunk count, a chunk's tensor, offset, length or bytes, a non-finite value),
  // changing nothing. Taking a shard already held replaces its values.
  absl::Status Take(const FinalShard& shard, const ShardMap& map);
  // The model file of the values taken (model/model_file.h: the map's tensors, in order).
  // REQUIRES: Complete(). An error means the map disagrees with itself.
  absl::StatusOr<std::string> Serialize(const ShardMap& map) const;

  // The model file was written: frees the values; written() from now on.
  void MarkWritten();
  // A restored scheduler's: the model was written before the restart.
  void set_written(bool written) { written_ = written; }
  bool written() const { return written_; }

 private:
  int num_shards_;             // replaced whole when the job changes its server count
  std::vector<bool> held_;     // by shard; allocated with the first shard
  std::vector<float> values_;  // the map's flat layout; allocated with the first shard
  bool written_ = false;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_FINAL_MODEL_ASSEMBLY_H_
