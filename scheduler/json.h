// The two pieces of JSON text the run summary needs: strings and numbers.
#ifndef PSTRAIN_SCHEDULER_JSON_H_
#define PSTRAIN_SCHEDULER_JSON_H_

#include <string>

#include "absl/strings/string_view.h"

namespace pstrain {
namespace scheduler {

// `text` as a quoted JSON string, with quotes, backslashes and control characters escaped.
std::string JsonString(absl::string_view text);

// `value` as a JSON number with up to 10 significant digits; "null" for NaN and infinities,
// which JSON cannot represent.
std::string JsonNumber(double value);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_JSON_H_
