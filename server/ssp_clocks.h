// SspClocks: the SSP(K) rule of the ParameterStore (JobSpec.staleness = K), on its own. A worker's
// clock counts its pushes in the current data epoch; a pull at clock c is answered once every live
// worker still in the epoch has clock >= c - K. So no worker runs more than K pushes ahead of the
// slowest one.
//
//   push from r (a step r did)       clock_r := max(clock_r + 1, step + 1); the push's step is the
//                                    worker's own clock, so a replacement server learns it
//   the same step pushed again       unchanged (the worker recomputed it for another server)
//   FinishEpoch from r               r holds nobody back until it pushes again (idle: waiting for a
//                                    lease while others hold the last ones, or for a stream's next
//                                    records), or the next epoch
//   a push from a finished r         r is back in, first raised to the smallest clock of the others
//                                    still in (as a joiner), then as any push
//   a new data epoch                 every clock 0, nobody finished
//   r joins the live set             starts at the smallest clock of the live workers still in the
//                                    epoch, so it holds nobody back more than they already do
//   a replacement server restores    every clock unknown until the worker's next push; an unknown
//                                    clock holds nobody back
//
// Thread safety: none; the ParameterStore calls it under its mutex.
#ifndef PSTRAIN_SERVER_SSP_CLOCKS_H_
#define PSTRAIN_SERVER_SSP_CLOCKS_H_

#include <cstdint>
#include <map>
#include <vector>

namespace pstrain::server {

class SspClocks {
 public:
  // K: the staleness bound (>= 0).
  explicit SspClocks(int staleness) : staleness_(staleness) {}

  // Makes `sorted_ranks` (ascending, distinct) the live workers: joiners start at the join clock
  // (see above; 0 when no live worker is in the epoch with a known clock), leavers are forgotten,
  // the others keep their state.
  void SetLive(const std::vector<int>& sorted_ranks);
  // A new data epoch: every clock 0, nobody finished.
  void NewEpoch();
  // Live worker `rank` pushed its step `step` in the current epoch; `same_step`: it pushed that
  // step before (no step done). Its clock is known from now on.
  void Pushed(int rank, int64_t step, bool same_step);
  // Live worker `rank` has no more pushes in the current epoch.
  void Finish(int rank);
  // Every clock unknown until its worker's next push.
  void ForgetClocks();

  // Whether a pull at clock `clock` may be answered now.
  bool Ready(int64_t clock) const;

 private:
  struct Clock {
    int64_t clock = 0;
    bool finished = false;
    bool known = true;
  };

  const int staleness_;
  std::map<int, Clock> clocks_;  // the live workers by rank
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SSP_CLOCKS_H_
