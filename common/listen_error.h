// The address a listener is given, and the error a role gives when it cannot listen there: the
// address, the likely causes and what to do, naming the flag that chose the port, so that a
// newcomer whose port is taken (say, by a job still running) knows the fix from the one line.
//
// Thread safety: pure functions.
#ifndef PSTRAIN_COMMON_LISTEN_ERROR_H_
#define PSTRAIN_COMMON_LISTEN_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// UNAVAILABLE: "<what>: cannot listen on <address>: the port is taken ... give another --<flag>
// (0 picks a free port)". `what` names the listener ("scheduler", "metrics"), `flag` the flag
// without dashes ("port", "metrics_port").
absl::Status CannotListen(absl::string_view what, absl::string_view address, absl::string_view flag);

// "host:port", with IPv6 literals in brackets ("[::1]:7001"): the address a listener is given.
std::string JoinHostPort(const std::string& host, int port);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_LISTEN_ERROR_H_
