// ASYNC/SSP: how stale the weights a worker computes on are. A server's PullResponse.step is its
// update count there, so between this worker's previous pull of a shard (answered at step p) and
// its next push-pull of it (answered at step s, after applying that push) the server applied
// s - p - 1 updates of other workers: the push's gradient was computed on weights that many
// updates old.
//
//   pull/push-pull  answered at p         ... other workers' updates ...
//   push-pull       answered at s  -> staleness s - p - 1 (0 when negative: a repeated batch
//                                     the server did not apply again, a restored checkpoint)
//
// Not thread-safe: the training session's thread.
#ifndef PSTRAIN_WORKER_PULL_STALENESS_H_
#define PSTRAIN_WORKER_PULL_STALENESS_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace pstrain::worker {

class PullStaleness {
 public:
  explicit PullStaleness(int num_shards) : last_(num_shards) {}

  // A pull of `shard` without a push of this worker (the first weights, an epoch's end): only
  // remembered.
  void Pulled(int shard, int64_t step) { last_[shard] = step; }
  // A push-pull of `shard` answered at `step`: its staleness, or nullopt when the shard was
  // never pulled before (nothing to compare with). Remembers the step.
  std::optional<int64_t> PushPulled(int shard, int64_t step);

 private:
  std::vector<std::optional<int64_t>> last_;  // by shard: the step of its last answer
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_PULL_STALENESS_H_
