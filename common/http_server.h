// A small HTTP/1.1 server for read-only endpoints: Prometheus' /metrics on every role, the
// scheduler's dashboard and JSON API. GET (and HEAD) only, answered on a few threads of its own, so
// a slow scraper never holds up training. Built on cpp-httplib (Debian's libcpp-httplib-dev).
//
// It is plaintext and unauthenticated on purpose, like --health_port: it serves statistics, never
// parameters, and nothing it answers changes the job. Bind it to loopback where that matters.
//
// Slow and idle clients cannot hold its threads (a slowloris attack): httplib accepts and parses,
// but a connection gets a thread only once the head of its request (request line and headers) has
// arrived in full; until then it waits in a poll() set, costing a file descriptor. Limits:
//   - 256 open connections; past that, the waiting connection silent the longest is closed;
//   - 5 s for the first byte of a request (a new connection, or keep-alive between requests);
//   - 5 s from a request's first byte to the end of its head, and at most 16 KiB of head;
//   - 10 s to read the rest and write the answer; a body of at most 64 KiB (none is needed);
//   - 100 requests a connection.
#ifndef PSTRAIN_COMMON_HTTP_SERVER_H_
#define PSTRAIN_COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

struct HttpRequest {
  std::string path;
  // Query parameters (?a=1&b=2); a repeated name keeps its first value.
  std::map<std::string, std::string> params;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Extra headers, e.g. {"Cache-Control", "no-store"}.
  std::vector<std::pair<std::string, std::string>> headers;
};

// Answers one request; runs on the server's threads, concurrently with other requests.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpRoute {
  // An exact path ("/metrics"), or a prefix ending in '/' when `prefix` is set ("/static/").
  std::string path;
  bool prefix = false;
  HttpHandler handler;
};

class HttpServer {
 public:
  // Listens on host:port (port 0: any free port, see port()) and serves `routes` until Stop() or
  // destruction. Paths no route takes get 404, other methods 405. UNAVAILABLE when the address
  // cannot be bound (in use, bad host), naming it.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                           std::vector<HttpRoute> routes, int threads = 2);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The port it listens on.
  int port() const { return port_; }
  // "host:port" as given (with the chosen port).
  const std::string& address() const { return address_; }

  // Stops listening and waits for requests in progress. Idempotent.
  void Stop();

  // Answers the requests in `bytes` as if they had arrived on one connection to a server of
  // `routes`, and returns what it would have written back: the same head check, httplib parsing and
  // routing as a socket's requests, without a socket or a thread. For the fuzz target
  // (fuzz/http_request_fuzz.cc).
  static std::string AnswerForTesting(std::vector<HttpRoute> routes, absl::string_view bytes);

 private:
  class GuardedServer;
  class Connections;
  HttpServer() = default;

  std::unique_ptr<GuardedServer> server_;
  // Destroyed (in Stop) after the accept loop has ended, before server_.
  std::unique_ptr<Connections> connections_;
  std::thread thread_;
  int port_ = 0;
  std::string address_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HTTP_SERVER_H_
