// What the text readers (criteo_reader.h, libsvm_reader.h) share: the bad-record policy and the
// record range a reader covers.
#ifndef PSTRAIN_DATA_TEXT_RECORDS_H_
#define PSTRAIN_DATA_TEXT_RECORDS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "data/line_reader.h"

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

// One reader's Next: the next line of `range` (from `lines`, which the reader opened at
// range.first) that `parse(line)` turns into a sample. `parse` returns true for a sample, false
// for a line that holds none (a comment), or an error for a bad line, which is DATA_LOSS
// "FILE:LINE: <error>" with BadRecords::kFail and counted in *skipped with kSkip. False at the
// end of the range or the file; errors of LineReader pass through.
template <typename Parse>
absl::StatusOr<bool> NextRecord(LineReader& lines, const RecordRange& range, BadRecords bad_records, int64_t* skipped,
                                Parse parse) {
  while (range.count < 0 || lines.lines() < range.first + range.count) {
    absl::string_view line;
    ASSIGN_OR_RETURN(const bool more, lines.Next(&line));
    if (!more) return false;
    const absl::StatusOr<bool> parsed = parse(line);
    if (parsed.ok()) {
      if (*parsed) return true;
      continue;
    }
    if (bad_records == BadRecords::kFail) {
      return absl::DataLossError(absl::StrCat(lines.path(), ":", lines.lines(), ": ", parsed.status().message()));
    }
    ++*skipped;
  }
  return false;
}

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_TEXT_RECORDS_H_
