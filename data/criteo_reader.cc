#include "data/criteo_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace data {
namespace {

// A value quoted in an error message: escaped, and cut so one junk line cannot flood a log.
std::string Quote(absl::string_view value) {
  constexpr size_t kMaxQuoted = 40;
  if (value.size() <= kMaxQuoted) return absl::StrCat("'", absl::CHexEscape(value), "'");
  return absl::StrCat("'", absl::CHexEscape(value.substr(0, kMaxQuoted)), "...'");
}

// A decimal integer with an optional sign, at most 18 digits (so no overflow).
bool ParseInteger(absl::string_view text, int64_t* value) {
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.size() > 18) return false;
  int64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *value = negative ? -v : v;
  return true;
}

// 1 to 8 hex digits, either case.
bool ParseHex32(absl::string_view text, uint32_t* value) {
  if (text.empty() || text.size() > 8) return false;
  uint32_t v = 0;
  for (const char c : text) {
    uint32_t digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    v = (v << 4) | digit;
  }
  *value = v;
  return true;
}

}  // namespace

absl::Status ParseCriteoLine(absl::string_view line, bool has_label, CtrSample* sample) {
  const int want = (has_label ? 1 : 0) + kCriteoDense + kCriteoCategorical;
  absl::string_view fields[1 + kCriteoDense + kCriteoCategorical];
  int count = 0;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    const absl::string_view field =
        line.substr(start, tab == absl::string_view::npos ? absl::string_view::npos : tab - start);
    if (count < want) fields[count] = field;
    ++count;
    if (tab == absl::string_view::npos) break;
    start = tab + 1;
  }
  if (count != want) {
    return absl::InvalidArgumentError(absl::StrCat(count, " fields, expected ", want, " tab-separated fields (",
                                                   has_label ? "label, " : "", kCriteoDense, " integer and ",
                                                   kCriteoCategorical, " categorical features)"));
  }
  int next = 0;
  if (has_label) {
    const absl::string_view label = fields[next++];
    if (label != "0" && label != "1") {
      return absl::InvalidArgumentError(absl::StrCat("label ", Quote(label), ", expected 0 or 1"));
    }
    sample->label = label[0] - '0';
  } else {
    sample->label = -1;
  }
  sample->dense_missing = 0;
  for (int i = 0; i < kCriteoDense; ++i) {
    const absl::string_view text = fields[next++];
    int64_t value = 0;
    if (text.empty()) {
      sample->dense_missing |= 1u << i;
    } else if (!ParseInteger(text, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("integer feature I", i + 1, " ", Quote(text), ", expected a decimal integer or nothing"));
    }
    sample->dense[i] = static_cast<float>(value);
  }
  sample->categorical_missing = 0;
  for (int f = 0; f < kCriteoCategorical; ++f) {
    const absl::string_view text = fields[next++];
    uint32_t value = 0;
    if (text.empty()) {
      sample->categorical_missing |= 1u << f;
      sample->keys[f] = CriteoMissingKey(f);
    } else if (ParseHex32(text, &value)) {
      sample->keys[f] = CriteoKey(f, value);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("categorical feature C", f + 1, " ", Quote(text), ", expected 1 to 8 hex digits or nothing"));
    }
    sample->categorical[f] = value;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(const std::string& path, const Options& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines,
                   LineReader::Open(path, std::max<int64_t>(options.range.first, 0)));
  return std::unique_ptr<CriteoReader>(new CriteoReader(std::move(lines), options));
}

absl::StatusOr<bool> CriteoReader::Next(CtrSample* sample) {
  return NextRecord(*lines_, options_.range, options_.bad_records, &skipped_,
                    [this, sample](absl::string_view line) -> absl::StatusOr<bool> {
                      RETURN_IF_ERROR(ParseCriteoLine(line, options_.has_label, sample));
                      return true;
                    });
}

}  // namespace data
}  // namespace pstrain
