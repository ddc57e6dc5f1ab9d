// Reads ranges of a data stream's global record positions (stream_catalog.h) into one CtrBatch:
// what a worker does with its slice of a stream's global batch. A range may span files, since the
// stream's files end at hour boundaries that batches do not respect; its pieces are read in order
// and joined.
//
// One CtrSource (ctr_source.h) stays open on the file last read, so a worker walking forward
// through the stream pays one pass per file:
//
//   range inside the open file, at or past its position    forward skip
//   range moving on to the next file(s)                    open each once
//   range in another file, or before the open position     one open (CtrSource reopens)
//
// The catalog counted each file's records when it took it. A file that now has fewer lines than
// that (truncated since) is DATA_LOSS rather than a short batch: CtrSource clips ranges to the
// file, so the source checks where each piece's reading stopped.
//
// Thread-compatible: one thread at a time (one source per reading thread). ReadBatch blocks on
// file I/O.
#ifndef PSTRAIN_DATA_STREAM_SOURCE_H_
#define PSTRAIN_DATA_STREAM_SOURCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "data/ctr_batch.h"
#include "data/ctr_source.h"
#include "data/stream_catalog.h"

namespace pstrain {
namespace data {

class StreamSource {
 public:
  // `options` (format, bad-record policy) apply to every file of the stream.
  explicit StreamSource(CtrSource::Options options);

  StreamSource(const StreamSource&) = delete;
  StreamSource& operator=(const StreamSource&) = delete;

  // Replaces `*out` with the samples of stream positions [first, first + count) of `catalog`,
  // in order, across as many files as the range spans. `catalog` is borrowed for the call only;
  // each file is read at catalog.dir()/name.
  //
  // INVALID_ARGUMENT for first < 0, count < 0 or first + count > catalog.records(). DATA_LOSS,
  // naming the file, the records catalogued and the lines asked, for a file that ends before
  // the catalog's count of its records. Errors of CtrSource pass through (they name the file):
  // NOT_FOUND for a file that is gone, DATA_LOSS for a bad record under BadRecords::kFail or a
  // corrupt file, ... On any error `*out` is an empty batch (ClearCtrBatch) and the open file is
  // closed.
  absl::Status ReadBatch(const StreamCatalog& catalog, int64_t first, int64_t count, CtrBatch* out);

  // Which files the samples of the last ReadBatch came from, in order: `samples` samples from
  // catalog.files()[file] each (a range's piece of a file may hold fewer samples than lines, when
  // bad records are skipped). Empty after an error.
  struct FileSamples {
    size_t file = 0;
    int64_t samples = 0;
  };
  const std::vector<FileSamples>& last_files() const { return last_files_; }

  // Bad records skipped (BadRecords::kSkip) by all calls so far, over every file; a record read
  // twice counts twice.
  int64_t skipped() const;

  // Times a file was opened so far, counting CtrSource's reopens for a range that went back.
  int64_t opens() const;

 private:
  // Reads lines [piece.begin, piece.end) of catalog.files()[piece.file] into `*out` (replaced),
  // opening that file unless it is the open one. `first` and `count` name the stream range in
  // errors.
  absl::Status ReadPiece(const StreamCatalog& catalog, const StreamPiece& piece, int64_t first, int64_t count,
                         CtrBatch* out);

  // Closes the open file, keeping its counts in the totals.
  void Close();

  // Constant after construction.
  const CtrSource::Options options_;

  std::unique_ptr<CtrSource> source_;  // The file last read (source_->path()); null when none.
  // Counts of the sources closed so far; the open one keeps its own until it is closed.
  int64_t closed_skipped_ = 0;
  int64_t closed_reopens_ = 0;
  int64_t opened_ = 0;  // CtrSource::Open calls
  // A range's second and later pieces, read here before being appended to the caller's batch;
  // kept so that its buffers are reused from call to call.
  CtrBatch piece_;
  std::vector<FileSamples> last_files_;
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_STREAM_SOURCE_H_
