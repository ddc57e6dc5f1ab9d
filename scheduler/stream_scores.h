// Progressive validation of a data stream by file (docs/design/streaming.md, "Progressive
// validation and lag"): every trained record is scored by the model before the update it leads to,
// and workers report those predictions by the stream file they came from (TrainStats.files). This
// keeps, per file, the predictions' AUC and mean log loss, and the same over a window of the newest
// files (the last few "hours").
//
// A file is open while records of it may still be reported, and is closed once every live worker
// has reported a step past its last record (the scheduler tells: CloseBefore): its AUC is then
// final and its histogram (data/score_histogram.h, 1 MiB) is dropped, unless the window still
// needs it. So at most the open files and the window's hold a histogram.
//
// The saved state keeps every file's figures, and the histograms the scheduler holds (the open
// files' and the window's: the non-empty bins only), so a restarted scheduler goes on with them
// exactly: a file whose records were all trained before the restart keeps its predictions.
//
// Thread-compatible; the scheduler guards it.
#ifndef PSTRAIN_SCHEDULER_STREAM_SCORES_H_
#define PSTRAIN_SCHEDULER_STREAM_SCORES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "data/score_histogram.h"
#include "data/stream_catalog.h"
#include "proto/scheduler.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {
namespace scheduler {

class StreamScores {
 public:
  // The window is the newest `window_files` files with scores (>= 1).
  // `saved` (a saved state's stream) must have passed CheckSaved.
  explicit StreamScores(int window_files, const StreamState& saved = StreamState());

  // INVALID_ARGUMENT, naming the file, for a saved state's scores that are not of its files, are
  // given twice, have negative or non-finite figures, or an open file without its histogram or a
  // histogram whose count is not the file's samples.
  static absl::Status CheckSaved(const StreamState& saved);

  // INVALID_ARGUMENT, naming the worker and the file, for file scores that are not of the
  // stream's first `files` files, malformed histograms, a file reported twice in one report, or
  // more predictions over the files than `train.samples()`. Records nothing.
  absl::Status Check(const TrainStats& train, int worker_rank, int64_t files) const;
  // Adds a checked report's file scores. Scores of a closed file are dropped (a late report).
  void Add(const TrainStats& train);
  // Closes every file of `files` (the stream's catalog) that ends at or before stream position
  // `trained`; one without scores is listed then, closed with none (its predictions were lost with
  // the workers that made them: a kill -9).
  void CloseBefore(const std::vector<data::StreamFile>& files, int64_t trained);

  struct Figures {
    int64_t samples = 0;        // predictions scored
    double log_loss = 0;        // mean; NaN without predictions
    std::optional<double> auc;  // unset without both a click and a non-click
  };
  struct File {
    int64_t index = 0;
    bool closed = false;
    Figures figures;
  };
  // Every file with scores, by index.
  std::vector<File> Files() const;
  // Over the window's files together.
  Figures Window() const;
  int window_files() const { return window_files_; }

  // The closed files' figures, into the saved state's stream.
  void Save(StreamState* state) const;

 private:
  struct Entry {
    bool closed = false;
    int64_t samples = 0;
    double log_loss_sum = 0;
    std::optional<double> auc;                        // closed: final
    std::unique_ptr<data::ScoreHistogram> histogram;  // open, or closed within the window
  };
  static Figures FiguresOf(const Entry& entry);
  // Drops the histograms of closed files that left the window.
  void Trim();

  const int window_files_;
  std::map<int64_t, Entry> files_;
  // CloseBefore has listed every file below this index.
  int64_t listed_through_ = 0;
};

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_STREAM_SCORES_H_
