// What the text readers (criteo_reader.h, libsvm_reader.h) share: the bad-record policy and the
// record range a reader covers.
#ifndef PSTRAIN_DATA_TEXT_RECORDS_H_
#define PSTRAIN_DATA_TEXT_RECORDS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {
namespace data {

// What a reader does with a line it cannot parse.
enum class BadRecords {
  kFail,  // Next returns DATA_LOSS "FILE:LINE: what, expected what" (the default).
  kSkip,  // Next skips the line and counts it in skipped().
};

// "fail" or "skip" (the spelling of --bad_records). INVALID_ARGUMENT otherwise.
absl::StatusOr<BadRecords> ParseBadRecords(absl::string_view text);

// The records (lines, see line_reader.h) a reader returns: [first, first + count), clipped to
// the file; count < 0 means to the end of the file. A scheduler hands out such ranges, so ranges
// that tile [0, CountLines(path)) cover every record exactly once. Lines of the range that are
// skipped (bad records, or libsvm comment lines) yield no sample but are still the range's.
struct RecordRange {
  int64_t first = 0;
  int64_t count = -1;
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_TEXT_RECORDS_H_
