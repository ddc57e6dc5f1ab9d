// UpdateClock: the scheduler's time as an embedding table's updates saw it, for eviction's
// ttl_seconds (EvictionSpec.ttl_seconds, server/row_eviction.h).
//
// Which clock. Not the server's own: a server and its replica would read it at different instants
// and evict different rows. Each ASYNC/SSP push carries the time the scheduler handed out its
// lease (PushRequest.lease_granted_unix_ms, signed in the lease's grant when the job checks
// sessions), and the clock is the largest of those over the pushes applied so far. A replica
// applies the same pushes, so it reads the same clock; a clock that never runs backward needs no
// agreement on the order of the pushes either.
//
// Rows do not store a time. A row remembers the update that last touched it (RowEviction), and
// this class maps updates to times with a few samples: (u_k, c_k) is recorded at the update u_k
// that moved the clock to c_k, at least the resolution (ttl / 64, at least 1 ms) past the last
// sample's. Update u_k ran at c_k and every update before it below c_k, so when c_k <= now - ttl,
// every row last updated at or before u_k is at least the TTL old. ExpiredThrough() returns that
// u_k for the newest such sample. A row therefore outlives its TTL by at most the resolution, plus
// the time to the next eviction pass (EvictionSpec.every_updates), and the clock's own grain: a
// lease's batches share the time their lease was handed out. None leaves early.
//
// Memory: the samples before the newest one at or past the TTL are dropped, so at most about 66
// are held, whatever the run's length.
//
// Thread safety: none; the table that owns it serializes calls.
#ifndef PSTRAIN_SERVER_UPDATE_CLOCK_H_
#define PSTRAIN_SERVER_UPDATE_CLOCK_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pstrain::server {

class UpdateClock {
 public:
  // ExpiredThrough() while no sample is at least the TTL old: no row has expired.
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::min();

  // A clock for a TTL of `ttl_ms` > 0 milliseconds.
  explicit UpdateClock(int64_t ttl_ms);

  // Update `update` (increasing from call to call: one call an update) runs at time `unix_ms` (milliseconds since
  // the Unix epoch; 0: no time, the clock stays). Call before the update's rows are touched.
  void Advance(int64_t update, int64_t unix_ms);

  // The clock: the largest time seen (0 before any).
  int64_t now_ms() const { return now_ms_; }

  // Rows last updated at or before the returned update are at least the TTL old; kNone when none
  // surely is.
  int64_t ExpiredThrough() const;

  // Samples held.
  size_t num_samples() const { return samples_.size(); }
  // Bytes held: this object and its samples.
  int64_t bytes_used() const { return static_cast<int64_t>(sizeof(*this) + samples_.size() * sizeof(Sample)); }

  // Checkpoints: the clock, then the samples, little-endian:
  //   int64 now_ms, uint64 count N, N x (int64 update, int64 unix_ms).
  void Serialize(std::string* out) const;
  // Installs what Serialize wrote. DATA_LOSS (prefixed with `what`) for a size that does not fit,
  // a negative clock, or samples out of order or past the clock; then nothing changes.
  absl::Status Restore(absl::string_view what, absl::string_view data);

 private:
  struct Sample {
    int64_t update;
    int64_t unix_ms;
  };
  void Prune();

  const int64_t ttl_ms_;
  const int64_t resolution_ms_;
  int64_t now_ms_ = 0;
  std::deque<Sample> samples_;
};

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_UPDATE_CLOCK_H_
