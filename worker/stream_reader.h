// A worker's reader of a data stream (JobSpec.data.stream_dir): record ranges of the stream's
// global positions, read from the ready files a view lists (ClusterView.stream). What the
// built-in CTR workload (worker/ctr_workload.h) and a Python worker (pstrain.torch.CtrStream,
// through pstrain._core.StreamReader) both read a step's records with.
//
// The view grows as the scheduler takes new files in; the reader rebuilds its catalog
// (data/stream_catalog.h) when the view lists more files, or has ended, and keeps one file open
// across calls (data/stream_source.h), so walking forward reads each file once.
//
// Thread-compatible: one thread at a time. Read blocks on file I/O.
#ifndef PSTRAIN_WORKER_STREAM_READER_H_
#define PSTRAIN_WORKER_STREAM_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/ctr_batch.h"
#include "data/ctr_source.h"
#include "data/stream_catalog.h"
#include "data/stream_source.h"
#include "proto/cluster.pb.h"

namespace pstrain::worker {

class StreamReader {
 public:
  // The stream in folder `dir`; `options` (format, bad-record policy) apply to every file.
  StreamReader(std::string dir, data::CtrSource::Options options);

  // Replaces `*out` with the samples of stream positions [first, first + count), in order, from
  // the files `stream` (a view's ClusterView.stream) lists. Errors are StreamSource::ReadBatch's:
  // INVALID_ARGUMENT for a range past the listed records, DATA_LOSS or NOT_FOUND naming the file
  // for a file truncated, damaged or gone.
  absl::Status Read(const StreamView& stream, int64_t first, int64_t count, data::CtrBatch* out);

  // Which listed files the samples of the last Read came from, in order, as (index in
  // stream.files(), samples): what a worker's progressive validation scores them under
  // (model::BatchStats::prediction_files).
  std::vector<std::pair<int64_t, int64_t>> last_files() const;

  // Bad records skipped so far (BadRecords::kSkip).
  int64_t skipped() const { return source_.skipped(); }

 private:
  const std::string dir_;
  data::StreamSource source_;
  std::optional<data::StreamCatalog> catalog_;  // of the files last listed; rebuilt as they grow
};

}  // namespace pstrain::worker

#endif  // PSTRAIN_WORKER_STREAM_READER_H_
