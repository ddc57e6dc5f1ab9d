#include "bench/socket_pingpong.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain::bench {
namespace {

absl::Status Errno(const char* what) {
  return absl::UnavailableError(absl::StrCat("socket ping-pong: ", what, ": ", std::strerror(errno)));
}

// Reads or writes exactly n bytes; false on EOF or error.
bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t got = read(fd, p, n);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return false;
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t put = write(fd, p, n);
    if (put <= 0) {
      if (put < 0 && errno == EINTR) continue;
      return false;
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

std::atomic<int> next_path{0};

}  // namespace

absl::StatusOr<std::unique_ptr<PingPong>> PingPong::Start(Transport transport, int64_t request_bytes,
                                                          int64_t reply_bytes) {
  std::unique_ptr<PingPong> p(new PingPong(request_bytes, reply_bytes));
  sockaddr_storage address{};
  socklen_t length = 0;
  if (transport == Transport::kTcp) {
    p->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    auto* in = reinterpret_cast<sockaddr_in*>(&address);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    length = sizeof(sockaddr_in);
  } else {
    p->listen_fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    p->unix_path_ = absl::StrCat("/tmp/pstrain-pingpong-", getpid(), "-", next_path++, ".sock");
    unlink(p->unix_path_.c_str());
    auto* un = reinterpret_cast<sockaddr_un*>(&address);
    un->sun_family = AF_UNIX;
    std::strncpy(un->sun_path, p->unix_path_.c_str(), sizeof(un->sun_path) - 1);
    length = sizeof(sockaddr_un);
  }
  if (p->listen_fd_ < 0) return Errno("socket");
  if (bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&address), length) != 0) return Errno("bind");
  if (listen(p->listen_fd_, 1) != 0) return Errno("listen");
  if (getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) return Errno("getsockname");
  p->client_fd_ = socket(transport == Transport::kTcp ? AF_INET : AF_UNIX, SOCK_STREAM, 0);
  if (p->client_fd_ < 0) return Errno("socket");
  if (connect(p->client_fd_, reinterpret_cast<sockaddr*>(&address), length) != 0) return Errno("connect");
  const int server_fd = accept(p->listen_fd_, nullptr, nullptr);
  if (server_fd < 0) return Errno("accept");
  if (transport == Transport::kTcp) {
    // Whole buffers go out at once; Nagle would only delay the last segment of each message.
    const int one = 1;
    setsockopt(p->client_fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(server_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  p->echo_ = std::thread([raw = p.get(), server_fd] { raw->Echo(server_fd); });
  return p;
}

void PingPong::Echo(int fd) {
  std::vector<char> request(request_.size());
  const std::vector<char> reply(reply_.size(), '\x03');
  while (ReadAll(fd, request.data(), request.size()) && WriteAll(fd, reply.data(), reply.size())) {
  }
  close(fd);
}

absl::Status PingPong::RoundTrip() {
  if (!WriteAll(client_fd_, request_.data(), request_.size())) return Errno("write");
  if (!ReadAll(client_fd_, reply_.data(), reply_.size())) return Errno("read");
  return absl::OkStatus();
}

PingPong::~PingPong() {
  // Closing the client ends the echo thread's read with EOF.
  if (client_fd_ >= 0) close(client_fd_);
  if (echo_.joinable()) echo_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (!unix_path_.empty()) unlink(unix_path_.c_str());
}

}  // namespace pstrain::bench
