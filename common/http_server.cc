#include "common/http_server.h"

#include <httplib.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pstrain {
namespace {

const HttpRoute* FindRoute(const std::vector<HttpRoute>& routes, const std::string& path) {
  for (const HttpRoute& r : routes) {
    if (r.prefix ? absl::StartsWith(path, r.path) : path == r.path) return &r;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                             std::vector<HttpRoute> routes, int threads) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *s->server_;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Requests are a line and a few headers: a peer that sends more, or stalls, is dropped.
  server.set_payload_max_length(64 * 1024);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_max_count(100);
  // httplib writes headers and body apart: with Nagle, a keep-alive scrape waits on the scraper's
  // delayed ACK (~40 ms each, measured by bench/metrics_scrape_bench).
  server.set_tcp_nodelay(true);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second process
  // bind the same port and take half the scrapes silently.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  auto shared_routes = std::make_shared<const std::vector<HttpRoute>>(std::move(routes));
  auto serve = [shared_routes](const httplib::Request& req, httplib::Response& res) {
    const HttpRoute* route = FindRoute(*shared_routes, req.path);
    if (route == nullptr) {
      res.status = 404;
      res.set_content(absl::StrCat("no such page: ", req.path, "\n"), "text/plain; charset=utf-8");
      return;
    }
    HttpRequest request;
    request.path = req.path;
    for (const auto& [name, value] : req.params) request.params.emplace(name, value);
    HttpResponse response = route->handler(request);
    res.status = response.status;
    for (const auto& [name, value] : response.headers) res.set_header(name, value);
    res.set_content(std::move(response.body), response.content_type);
  };
  server.Get(".*", serve);
  auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content(absl::StrCat(req.method, " is not allowed here: this server is read-only\n"),
                    "text/plain; charset=utf-8");
  };
  server.Post(".*", not_allowed);
  server.Put(".*", not_allowed);
  server.Delete(".*", not_allowed);
  server.Patch(".*", not_allowed);

  if (port == 0) {
    s->port_ = server.bind_to_any_port(host);
    if (s->port_ < 0) return absl::UnavailableError(absl::StrCat("HTTP: cannot listen on ", host, ":0"));
  } else {
    if (!server.bind_to_port(host, port)) {
      return absl::UnavailableError(
          absl::StrCat("HTTP: cannot listen on ", host, ":", port, " (in use, or not an address of this host)"));
    }
    s->port_ = port;
  }
  s->address_ = absl::StrCat(host, ":", s->port_);
  s->thread_ = std::thread([&server] { server.listen_after_bind(); });
  // httplib's stop() does nothing until the loop runs, so a Stop() right after Start() would leave
  // the thread listening forever: wait for the loop (it starts at once; the deadline is for a loop
  // that ended before it was seen running).
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!server.is_running()) {
    if (absl::Now() > deadline) {
      s->Stop();
      return absl::InternalError(absl::StrCat("HTTP: the listener on ", s->address_, " did not start"));
    }
    absl::SleepFor(absl::Microseconds(100));
  }
  return s;
}

void HttpServer::Stop() {
  if (server_ == nullptr) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace pstrain
