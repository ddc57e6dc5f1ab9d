#include "data/text_records.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace data {

absl::StatusOr<BadRecords> ParseBadRecords(absl::string_view text) {
  if (text == "fail") return BadRecords::kFail;
  if (text == "skip") return BadRecords::kSkip;
  return absl::InvalidArgumentError(absl::StrCat("bad_records '", absl::CHexEscape(text), "', expected fail or skip"));
}

}  // namespace data
}  // namespace pstrain
