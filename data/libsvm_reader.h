// Streaming reader for libsvm / svmlight text, plain or gzip (detected from the magic bytes).
//
// Format: one sample per line, tokens separated by spaces or tabs:
//   label index:value index:value ...  [# comment]
// label and value are finite decimal floats ("1", "-1", "+1", "0.5", "3e-2"); index is a decimal
// uint64. Indices are kept as written: neither ascending order nor uniqueness is required or
// checked (libsvm's own tools want ascending indices; sort in the caller if the model does). A
// svmlight "qid:N" token after the label is accepted and ignored. Everything from '#' to the end
// of the line is a comment. A line that is empty or only a comment is a record that yields no
// sample (and is not counted as skipped), so record numbers stay line numbers (text_records.h).
//
// Bad records (a missing or non-numeric label, a token that is not index:value, a non-finite
// number) follow Options::bad_records; the message is "FILE:LINE: what, expected what".
//
// Thread-compatible: one thread at a time. Next blocks on file I/O.
#ifndef PSTRAIN_DATA_LIBSVM_READER_H_
#define PSTRAIN_DATA_LIBSVM_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/line_reader.h"
#include "data/text_records.h"

namespace pstrain {
namespace data {

struct LibsvmSample {
  float label = 0;
  std::vector<std::pair<uint64_t, float>> features;  // (index, value), in file order.
};

// Parses one line (without '\n'). OK and true: a sample in `*sample`; OK and false: the line is
// empty or only a comment. INVALID_ARGUMENT "what, expected what" (no file or line) for a bad
// record. `sample->features` is cleared first and keeps its capacity.
absl::StatusOr<bool> ParseLibsvmLine(absl::string_view line, LibsvmSample* sample);

class LibsvmReader {
 public:
  struct Options {
    BadRecords bad_records = BadRecords::kFail;
    RecordRange range;
  };

  // Opens `path` and skips to options.range.first. Errors: those of LineReader::Open and Skip.
  static absl::StatusOr<std::unique_ptr<LibsvmReader>> Open(const std::string& path, const Options& options);

  // The next sample of the range: true; false after the range's last record. DATA_LOSS for a
  // bad record under kFail ("FILE:LINE: what, expected what") or for a corrupt file.
  absl::StatusOr<bool> Next(LibsvmSample* sample);

  // Bad records skipped so far (kSkip).
  int64_t skipped() const { return skipped_; }

 private:
  LibsvmReader(std::unique_ptr<LineReader> lines, const Options& options)
      : lines_(std::move(lines)), options_(options) {}

  std::unique_ptr<LineReader> lines_;
  const Options options_;
  int64_t skipped_ = 0;
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_LIBSVM_READER_H_
