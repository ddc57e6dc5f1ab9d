// Ports for the listeners the launcher hands out (the dashboard, each role's /metrics), chosen by
// the launcher so it can print every URL before the roles start.
#ifndef PSTRAIN_LAUNCH_FREE_PORT_H_
#define PSTRAIN_LAUNCH_FREE_PORT_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"

namespace pstrain {
namespace launch {

// A TCP port that `host` (an IPv4 address) can bind now, not in `taken`. Chosen below the kernel's
// ephemeral range (/proc/sys/net/ipv4/ip_local_port_range) where that leaves room, so that the
// roles' own `--port=0` listeners, which take ephemeral ports, cannot land on it between this
// check and the child's bind. UNAVAILABLE when no port could be found.
absl::StatusOr<int> PickFreePort(const std::string& host, const std::set<int>& taken = {});

}  // namespace launch
}  // namespace pstrain

#endif  // PSTRAIN_LAUNCH_FREE_PORT_H_
