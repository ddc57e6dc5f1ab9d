// The catalog of a data stream (docs/design/streaming.md, "The stream and its catalog"): the ready
// files of a folder, in name order, each with its record count, and the global record positions
// they span. Files arrive over time; Refresh takes in the newly ready ones.
//
// The folder's conventions (what pstrain-gen-ctr --stream_dir writes, data/ctr_stream_writer.h):
//   NAME         a data file (Criteo or libsvm, plain or gzip), never read before NAME.ready exists
//   NAME.ready   an empty marker, made once NAME is whole
//   _END         the stream is over: no file comes after
// Positions are global record indices over the files in name order: record p is line
// p - first(f) of the file f whose [first, first + records) holds it. Names must only grow: a
// ready file that sorts before the last one taken would shift the positions already handed out,
// and is refused.
//
// A file taken is expected to stay as it was until every record of it is trained: Refresh checks
// the size and modification time of those past the trained position and refuses a change or a
// disappearance (DATA_LOSS, naming the file). Files wholly before it may go (a writer's retention).
//
// Not thread-safe: its owner (the scheduler) guards it. Refresh blocks on listing the folder and
// counting new files' records.
#ifndef PSTRAIN_DATA_STREAM_CATALOG_H_
#define PSTRAIN_DATA_STREAM_CATALOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {
namespace data {

struct StreamFile {
  std::string name;   // within the folder
  int64_t first = 0;  // the global position of its first record
  int64_t records = 0;
  // What identifies the version counted: a change later is refused.
  int64_t size = 0;
  int64_t modified_ns = 0;
};

// A piece of a position range inside one file: lines [begin, end) of files[file].
struct StreamPiece {
  size_t file = 0;
  int64_t begin = 0, end = 0;
};

class StreamCatalog {
 public:
  // Refreshes of `dir`; `files` and `ended` as a saved catalog had them (empty: a new stream).
  explicit StreamCatalog(std::string dir, std::vector<StreamFile> files = {}, bool ended = false);

  // Takes in the files made ready since the last call, in name order, counting their records, and
  // notes the end marker. Returns how many files were added. `trained` is the position below which
  // every record is trained (files wholly before it are not checked). Errors (nothing is taken
  // then): NOT_FOUND for a missing folder; FAILED_PRECONDITION for a ready file that sorts before
  // the last one taken, or a marker whose file is missing; DATA_LOSS for a file taken that changed
  // or disappeared with records not yet trained; the counting's errors for a file that does not
  // read. Each names the file.
  absl::StatusOr<int> Refresh(int64_t trained);

  const std::string& dir() const { return dir_; }
  const std::vector<StreamFile>& files() const { return files_; }
  // Records in the files taken: positions [0, records()) are ready.
  int64_t records() const { return files_.empty() ? 0 : files_.back().first + files_.back().records; }
  // The end marker was seen: records() is the stream's length.
  bool ended() const { return ended_; }

  // The pieces of positions [begin, end), in order. REQUIRES: 0 <= begin <= end <= records().
  std::vector<StreamPiece> Locate(int64_t begin, int64_t end) const;

 private:
  std::string dir_;
  std::vector<StreamFile> files_;
  bool ended_ = false;
};

inline constexpr char kStreamReadyMarker[] = ".ready";
inline constexpr char kStreamEndMarker[] = "_END";

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_STREAM_CATALOG_H_
