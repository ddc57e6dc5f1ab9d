#include "common/listen_error.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::Status CannotListen(absl::string_view what, absl::string_view address, absl::string_view flag) {
  return absl::UnavailableError(absl::StrCat(
      what, ": cannot listen on ", address,
      ": the port is taken (by another program, or a pstrain job still running: `ss -ltnp` names it) or the host is "
      "not an address of this machine; free it, or give another --",
      flag, " (0 picks a free port)"));
}

}  // namespace pstrain
