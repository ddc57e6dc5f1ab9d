#include "data/libsvm_reader.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace data {
namespace {

std::string Quote(absl::string_view value) {
  constexpr size_t kMaxQuoted = 40;
  if (value.size() <= kMaxQuoted) return absl::StrCat("'", absl::CHexEscape(value), "'");
  return absl::StrCat("'", absl::CHexEscape(value.substr(0, kMaxQuoted)), "...'");
}

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

// The next space-separated token of `*rest`, removed from it; empty at the end.
absl::string_view NextToken(absl::string_view* rest) {
  size_t i = 0;
  while (i < rest->size() && IsSpace((*rest)[i])) ++i;
  size_t j = i;
  while (j < rest->size() && !IsSpace((*rest)[j])) ++j;
  const absl::string_view token = rest->substr(i, j - i);
  rest->remove_prefix(j);
  return token;
}

bool ParseFiniteFloat(absl::string_view text, float* value) {
  return absl::SimpleAtof(text, value) && std::isfinite(*value);
}

}  // namespace

absl::StatusOr<bool> ParseLibsvmLine(absl::string_view line, LibsvmSample* sample) {
  sample->features.clear();
  const size_t hash = line.find('#');
  if (hash != absl::string_view::npos) line = line.substr(0, hash);
  absl::string_view rest = line;
  const absl::string_view label = NextToken(&rest);
  if (label.empty()) return false;
  if (!ParseFiniteFloat(label, &sample->label)) {
    return absl::InvalidArgumentError(absl::StrCat("label ", Quote(label), ", expected a finite number"));
  }
  int position = 0;
  for (absl::string_view token = NextToken(&rest); !token.empty(); token = NextToken(&rest)) {
    ++position;
    if (position == 1 && absl::StartsWith(token, "qid:")) continue;
    const size_t colon = token.find(':');
    uint64_t index = 0;
    float value = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(token.substr(0, colon), &index) || token[0] == '-' ||
        token[0] == '+' || !ParseFiniteFloat(token.substr(colon + 1), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature ", position, " ", Quote(token),
                       ", expected index:value with a decimal uint64 index and a finite number"));
    }
    sample->features.emplace_back(index, value);
  }
  return true;
}

absl::StatusOr<std::unique_ptr<LibsvmReader>> LibsvmReader::Open(const std::string& path, const Options& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines,
                   LineReader::Open(path, std::max<int64_t>(options.range.first, 0)));
  return std::unique_ptr<LibsvmReader>(new LibsvmReader(std::move(lines), options));
}

absl::StatusOr<bool> LibsvmReader::Next(LibsvmSample* sample) {
  // An empty or comment-only line parses to false: no sample, not a bad record.
  return NextRecord(*lines_, options_.range, options_.bad_records, &skipped_,
                    [sample](absl::string_view line) { return ParseLibsvmLine(line, sample); });
}

}  // namespace data
}  // namespace pstrain
