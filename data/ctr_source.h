// Reads record ranges of one CTR file (Criteo or libsvm, plain or gzip) into CtrBatch values:
// what a worker does with the ranges a scheduler hands it.
//
// Record i is line i of the file (line_reader.h). The file is streamed, never held whole: the
// source keeps one open reader whose position is the next record it would read, and serves each
// range by skipping forward from there. Only a range that starts before that position reopens
// the file and skips from its start. So the access patterns of a job cost one pass per epoch:
//
//   sync   step slices [b0, e0) [b1, e1) ... with b0 < b1 < ...   forward skips only
//          next epoch starts again at 0                           one reopen
//   async  a lease [l, l + n) read in batches going forward       forward skips only
//          a later lease further on                               forward skip
//          a lease before the position                            one reopen
//
// What a batch holds (ctr_batch.h):
//   criteo  num_dense 13, dense = LogTransform(value) (0 when missing); 26 fields, one key per
//           sample each: CriteoKey, or CriteoMissingKey for an empty value; no weights.
//   libsvm  num_dense 0; one field whose bag is the line's indices (as written: order and
//           duplicates kept) with their values as weights; label > 0 is 1, else 0.
// A line that holds no sample (a libsvm comment line, a bad record under BadRecords::kSkip)
// still belongs to its range, so ranges that tile [0, CountLines) cover every record once.
//
// Thread-compatible: one thread at a time (one source per reading thread). ReadBatch blocks on
// file I/O.
#ifndef PSTRAIN_DATA_CTR_SOURCE_H_
#define PSTRAIN_DATA_CTR_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/criteo_reader.h"
#include "data/ctr_batch.h"
#include "data/ctr_files.h"
#include "data/libsvm_reader.h"
#include "data/line_reader.h"
#include "data/text_records.h"

namespace pstrain {
namespace data {

class CtrSource {
 public:
  struct Options {
    DataFormat format = DataFormat::kCriteo;
    BadRecords bad_records = BadRecords::kFail;
  };

  // Opens `path`, positioned at record 0. Errors of LineReader::Open: NOT_FOUND for a missing
  // file ("<path>: cannot open: ..."), PERMISSION_DENIED, ...
  static absl::StatusOr<std::unique_ptr<CtrSource>> Open(const std::string& path, const Options& options);

  CtrSource(const CtrSource&) = delete;
  CtrSource& operator=(const CtrSource&) = delete;

  // Replaces `*out` with the samples of records [first, first + count), clipped to the file: a
  // range past the end gives an empty batch (size 0), not an error. The vectors of `*out` are
  // cleared and refilled, keeping their capacity, so a batch reused across calls stops
  // allocating after the first few.
  //
  // INVALID_ARGUMENT for first < 0, count < 0 or a range past INT64_MAX. DATA_LOSS for a bad
  // record under BadRecords::kFail ("FILE:LINE: what, expected what", LINE 1-based) or a corrupt
  // file. On any error `*out` is an empty batch (size 0, every field's offsets {0}) and the next
  // call reopens the file.
  absl::Status ReadBatch(int64_t first, int64_t count, CtrBatch* out);

  // Bad records skipped (BadRecords::kSkip) by all calls so far; a record read twice counts twice.
  int64_t skipped() const { return skipped_; }

  // Times the file was reopened because a range started before position() (or after an error).
  int64_t reopens() const { return reopens_; }

  // The next record the open reader would read: where the last range ended (or the end of the
  // file, if it ended past it); 0 after an error, when no reader is open. A range starting here
  // or later costs only the records in between; one starting before reopens the file.
  int64_t position() const { return lines_ == nullptr ? 0 : lines_->lines(); }

  const std::string& path() const { return path_; }

 private:
  CtrSource(std::string path, const Options& options, std::unique_ptr<LineReader> lines)
      : path_(std::move(path)), options_(options), lines_(std::move(lines)) {}

  // Moves the reader to record `first`: skips forward, or reopens to go back.
  absl::Status Seek(int64_t first);

  // Reads the records of `range` (the reader is at range.first) and appends their samples.
  absl::Status AppendCriteo(const RecordRange& range, CtrBatch* out);
  absl::Status AppendLibsvm(const RecordRange& range, CtrBatch* out);

  // Constant after construction.
  const std::string path_;
  const Options options_;

  std::unique_ptr<LineReader> lines_;  // Null after an error, until the next call reopens.
  int64_t skipped_ = 0;
  int64_t reopens_ = 0;
  // Parsed lines, kept so that their buffers are reused from sample to sample.
  CtrSample criteo_sample_;
  LibsvmSample libsvm_sample_;
};

// Makes `*out` an empty batch of `format` (size 0; num_dense and the number of fields set, each
// field's offsets {0}), keeping the capacity of its vectors.
void ClearCtrBatch(DataFormat format, CtrBatch* out);

// Appends the samples of `from` after those of `*to`, in order: what reading the two ranges as
// one would give. A field's weights stay empty only if both sides' are; otherwise the result has
// one per key, 1 for each key of a side without weights.
// REQUIRES: the same num_dense and number of fields (CHECKed); &from != to.
void AppendCtrBatch(const CtrBatch& from, CtrBatch* to);

// Appends one parsed record to a batch of its format (ClearCtrBatch made it): the label (libsvm:
// > 0 is a click), the dense features transformed for the model, each field's bag. What
// CtrSource::ReadBatch does for every record it reads, for callers that parse lines themselves
// (pstrain-serve's Predict).
void AppendCriteoSample(const CtrSample& sample, CtrBatch* out);
void AppendLibsvmSample(const LibsvmSample& sample, CtrBatch* out);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_CTR_SOURCE_H_
