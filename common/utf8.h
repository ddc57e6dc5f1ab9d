// UTF-8 checks for text that must be UTF-8 before it goes where protobuf's `string` fields go
// (which refuse to parse anything else): tensor names in model files, error messages kept in the
// scheduler's state file.
#ifndef PSTRAIN_COMMON_UTF8_H_
#define PSTRAIN_COMMON_UTF8_H_

#include <string>

#include "absl/strings/string_view.h"

namespace pstrain {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool IsValidUtf8(absl::string_view s);

// `s` itself when it is valid UTF-8; otherwise `s` with C escapes (\xff) for every byte outside
// printable ASCII, which is valid and still readable.
std::string ToValidUtf8(absl::string_view s);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_UTF8_H_
