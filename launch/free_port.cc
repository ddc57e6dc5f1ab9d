#include "launch/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace launch {
namespace {

// Binds `port` on `host` (0: any) and returns the port bound, or 0.
int TryBind(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return 0;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int bound = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    bound = ntohs(addr.sin_port);
  }
  close(fd);
  return bound;
}

int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(in >> low)) return 32768;
  return low;
}

}  // namespace

absl::StatusOr<int> PickFreePort(const std::string& host, const std::set<int>& taken) {
  const int high = EphemeralLow();
  const int low = high - 12000;
  if (low >= 1024) {
    absl::BitGen gen;
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = absl::Uniform(gen, low, high);
      if (taken.count(port) == 0 && TryBind(host, port) == port) return port;
    }
  }
  // No room below the ephemeral range: any port the kernel gives.
  for (int attempt = 0; attempt < 20; ++attempt) {
    const int port = TryBind(host, 0);
    if (port > 0 && taken.count(port) == 0) return port;
  }
  return absl::UnavailableError(absl::StrCat("no free TCP port on ", host, " for the metrics and dashboard"));
}

}  // namespace launch
}  // namespace pstrain
