// A job's data stream as the scheduler hands it out (docs/design/streaming.md): the catalog of the
// ready files (data/stream_catalog.h) and what it makes trainable.
//
// SYNC on a stream: global batch t is stream positions [t*G, (t+1)*G), G the job's global batch, in
// order and without a permutation, so a step may start once the catalog holds its last record. The
// trainable steps are therefore the whole global batches the ready files hold, plus the last short
// one once the stream has ended. The views carry the ready files (ClusterView.stream) with
// train_samples = the ready records and total_steps = the trainable steps; workers that reach
// total_steps wait for the next view while the stream goes on.
//
// Refreshing lists the folder and counts new files, which may take a while: the owner copies the
// catalog under its lock (catalog()), refreshes the copy outside it, and installs the result
// (Install), so one slow file holds up no call. Thread-compatible; the scheduler guards it.
#ifndef PSTRAIN_SCHEDULER_STREAM_FEED_H_
#define PSTRAIN_SCHEDULER_STREAM_FEED_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data/stream_catalog.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

// Steps a stream of `records` ready records makes trainable at global batch `global_batch`: whole
// batches, and the last short one when `ended`. REQUIRES: records >= 0, global_batch >= 1.
int64_t StreamTrainableSteps(int64_t records, int64_t global_batch, bool ended);

// `catalog`'s files and end, as saved (no scores).
StreamState CatalogState(const data::StreamCatalog& catalog);

class StreamFeed {
 public:
  // The stream of `dir`, as a saved state had it (empty: nothing taken yet).
  StreamFeed(std::string dir, int64_t global_batch, const StreamState& saved = StreamState());

  const data::StreamCatalog& catalog() const { return catalog_; }
  // Replaces the catalog with a refreshed copy of it. REQUIRES: a copy of catalog() that only took
  // in files (StreamCatalog::Refresh).
  void Install(data::StreamCatalog refreshed);

  int64_t records() const { return catalog_.records(); }
  bool ended() const { return catalog_.ended(); }
  int64_t trainable_steps() const { return StreamTrainableSteps(records(), global_batch_, ended()); }

  // The ready files, for the views.
  StreamView View() const;
  // The catalog, for the saved state; StreamFeed(dir, g, Save()) is this feed again.
  StreamState Save() const;

 private:
  const int64_t global_batch_;
  data::StreamCatalog catalog_;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_STREAM_FEED_H_
