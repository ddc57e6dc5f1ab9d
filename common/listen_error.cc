#include "common/listen_error.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

absl::Status CannotListen(absl::string_view what, absl::string_view address, absl::string_view flag) {
  return absl::UnavailableError(absl::StrCat(
      what, ": cannot listen on ", address,
      ": the port is taken (by another program, or a pstrain job still running: `ss -ltnp` names it) or the host is "
      "not an address of this machine; free it, or give another --",
      flag, " (0 picks a free port)"));
}

std::string JoinHostPort(const std::string& host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace pstrain
