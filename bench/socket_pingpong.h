// The ceiling for moving bytes between two processes' worth of code on one machine: a plain
// blocking socket ping-pong (send N bytes, get N bytes back) over TCP on 127.0.0.1 or over a unix
// domain socket, with nothing but read and write on either side. ps_bench measures it in the same
// invocation as PushPull, so the transport's cost reads as a ratio against this baseline.
//
// Thread safety: one PingPong per benchmark thread; its echo thread is its own.
#ifndef PSTRAIN_BENCH_SOCKET_PINGPONG_H_
#define PSTRAIN_BENCH_SOCKET_PINGPONG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain::bench {

class PingPong {
 public:
  enum class Transport { kTcp, kUnix };

  // Starts an echo thread listening on 127.0.0.1:0 or on a fresh unix socket path, and connects
  // to it. Echo replies are `bytes` long. UNAVAILABLE when a socket call fails.
  static absl::StatusOr<std::unique_ptr<PingPong>> Start(Transport transport, int64_t bytes);
  ~PingPong();

  // Sends `bytes` and reads as many back; INTERNAL (with errno text) on a socket error.
  absl::Status RoundTrip();

 private:
  PingPong(int64_t bytes) : buffer_(static_cast<size_t>(bytes), '\x02') {}
  void Echo(int fd);

  std::vector<char> buffer_;  // the client's payload and answer
  int listen_fd_ = -1;
  int client_fd_ = -1;
  std::string unix_path_;  // unlinked on destruction
  std::thread echo_;
};

}  // namespace pstrain::bench

#endif  // PSTRAIN_BENCH_SOCKET_PINGPONG_H_
