// The ceiling for moving bytes between two processes' worth of code on one machine: a plain
// blocking socket ping-pong (send N bytes, get N bytes back) over TCP on 127.0.0.1 or over a unix
// domain socket, with nothing but read and write on either side. ps_bench measures it in the same
// invocation as PushPull, so the transport's cost reads as a ratio against this baseline. The two
// directions may carry different sizes (sparse_bench: a pull's few key bytes up and its rows back).
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
  static absl::StatusOr<std::unique_ptr<PingPong>> Start(Transport transport, int64_t bytes) {
    return Start(transport, bytes, bytes);
  }
  // The same with requests of `request_bytes` answered by `reply_bytes`. REQUIRES: both > 0.
  static absl::StatusOr<std::unique_ptr<PingPong>> Start(Transport transport, int64_t request_bytes,
                                                         int64_t reply_bytes);
  ~PingPong();

  // Sends a request and reads the whole reply; UNAVAILABLE (with errno text) on a socket error.
  absl::Status RoundTrip();

 private:
  PingPong(int64_t request_bytes, int64_t reply_bytes)
      : request_(static_cast<size_t>(request_bytes), '\x02'), reply_(static_cast<size_t>(reply_bytes)) {}
  void Echo(int fd);

  std::vector<char> request_;  // the client's payload
  std::vector<char> reply_;    // where the client reads the answer
  int listen_fd_ = -1;
  int client_fd_ = -1;
  std::string unix_path_;  // unlinked on destruction
  std::thread echo_;
};

}  // namespace pstrain::bench

#endif  // PSTRAIN_BENCH_SOCKET_PINGPONG_H_
