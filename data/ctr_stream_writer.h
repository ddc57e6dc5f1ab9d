// A CTR stream written over time, as hourly partitions arrive in production
// (docs/design/streaming.md, "The stream and its catalog"): one Criteo file per "hour" drawn from a
// planted model (data/planted_ctr_model.h) whose keys drift hour by hour (an hour plays one of its
// days), each written under a temporary name and renamed, then marked ready by an empty
// `NAME.ready`; after the last hour an empty `_END` ends the stream. With a rate the writer sleeps
// so that no more than `records_per_second` records have been marked ready at any time.
//
//   DIR/part-00000.tsv, DIR/part-00000.tsv.ready, DIR/part-00001.tsv, ..., DIR/_END
//
// Thread safety: a free function; it blocks for as long as the rate says.
#ifndef PSTRAIN_DATA_CTR_STREAM_WRITER_H_
#define PSTRAIN_DATA_CTR_STREAM_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "data/planted_ctr_model.h"
#include "data/stream_catalog.h"

namespace pstrain {
namespace data {

struct CtrStreamOptions {
  // model.days is the number of hours (files); model.new_key_rate how much each hour brings ids
  // of its own.
  PlantedCtrOptions model;
  int64_t records_per_hour = 100000;  // >= 2
  double records_per_second = 0;      // 0: as fast as the disk takes them
  bool gzip = false;
  // Hours already in DIR are kept and writing goes on after them (a writer restarted); false:
  // refused when DIR holds any part file.
  bool resume = false;
};

// What one hour's file holds, reported after its marker is written.
struct CtrStreamHour {
  int hour = 0;
  std::string path;
  int64_t records = 0;
  int64_t positives = 0;
  // The exact AUC (auc.h) of the planted probabilities on this hour's records: the best a model
  // trained on the hours before (progressive validation) can score on it.
  double planted_auc = 0;
};

// `DIR/part-<hour, 5 digits>.tsv` (.tsv.gz with gzip).
std::string CtrStreamFileName(int hour, bool gzip);

// Writes the stream into `dir` (created if missing), calling `on_hour` after each hour is marked
// ready. INVALID_ARGUMENT for bad options; FAILED_PRECONDITION when `dir` holds part files already
// (without resume) or an `_END`; the file errors of common/file_io.h, naming the file.
absl::Status WriteCtrStream(const std::string& dir, const CtrStreamOptions& options,
                            const std::function<void(const CtrStreamHour&)>& on_hour);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_CTR_STREAM_WRITER_H_
