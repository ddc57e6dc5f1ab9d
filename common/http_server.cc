#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
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

// True once `head` holds a whole request line and headers (httplib accepts bare LF endings too).
bool RequestHeadComplete(absl::string_view head) {
  return absl::StrContains(head, "\n\r\n") || absl::StrContains(head, "\n\n");
}

// False as soon as `head` cannot begin an HTTP/1 request: its request line starts with a method of
// capital letters and a space (after at most a couple of empty lines). A TLS ClientHello (first
// byte 0x16) or other binary is closed at once rather than held until the header deadline.
bool MayBeHttpRequest(absl::string_view head) {
  size_t i = 0;
  while (i < head.size() && i < 4 && (head[i] == '\r' || head[i] == '\n')) ++i;
  for (size_t n = 0; i < head.size(); ++i, ++n) {
    const char c = head[i];
    if (c == ' ') return n > 0;
    if (c < 'A' || c > 'Z' || n >= 16) return false;
  }
  return true;
}

// Milliseconds from now to `deadline`, for poll(): 0 when past.
int MillisUntil(absl::Time deadline) {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 1 << 30));
}

// The limits the header lists.
constexpr int kMaxConnections = 256;
constexpr absl::Duration kIdleTimeout = absl::Seconds(5);
constexpr absl::Duration kHeaderTimeout = absl::Seconds(5);
constexpr absl::Duration kRequestTimeout = absl::Seconds(10);
constexpr size_t kMaxHeadBytes = 16 << 10;
constexpr size_t kMaxBodyBytes = 64 << 10;
constexpr int kMaxRequestsPerConnection = 100;

// One connection as httplib's request processing reads and writes it: first the bytes the waiting
// room already read (the request head, perhaps more), then the socket, each wait cut short at
// `deadline`, so that a peer that trickles its body or never reads the answer loses its worker
// thread at the deadline, not after a timeout per byte.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, std::string buffered, absl::Time deadline)
      : fd_(fd), buffer_(std::move(buffered)), deadline_(deadline) {}

  bool is_readable() const override { return pos_ < buffer_.size() || Wait(POLLIN); }
  bool is_writable() const override { return Wait(POLLOUT); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == buffer_.size()) {
      if (!Wait(POLLIN)) return -1;
      buffer_.resize(4096);
      const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
      buffer_.resize(std::max<ssize_t>(n, 0));
      pos_ = 0;
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, buffer_.size() - pos_);
    std::copy_n(buffer_.data() + pos_, n, ptr);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!Wait(POLLOUT)) return -1;
    return send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { Address(getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { Address(getsockname, ip, port); }
  socket_t socket() const override { return fd_; }

  // What was read but not yet used: the start of the next request on a keep-alive connection.
  std::string TakeBuffered() { return buffer_.substr(pos_); }

 private:
  bool Wait(short events) const {
    pollfd p{fd_, events, 0};
    return poll(&p, 1, MillisUntil(deadline_)) > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }

  void Address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    ip.clear();
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      port = ntohs(in->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      port = ntohs(in6->sin6_port);
    }
    ip = text;
  }

  const int fd_;
  std::string buffer_;
  size_t pos_ = 0;
  const absl::Time deadline_;
};

// A connection held in memory, for AnswerForTesting: reads `input`, collects what is written.
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(absl::string_view input) : input_(input) {}

  bool is_readable() const override { return pos_ < input_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, input_.size() - pos_);
    std::copy_n(input_.data() + pos_, n, ptr);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    output_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 1;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 2;
  }
  socket_t socket() const override { return -1; }

  absl::string_view rest() const { return input_.substr(pos_); }
  const std::string& output() const { return output_; }

 private:
  const absl::string_view input_;
  size_t pos_ = 0;
  std::string output_;
};

// Serves `routes` on `server` (GET and HEAD; other methods 405), and sets its request limits.
void InstallRoutes(httplib::Server& server, std::vector<HttpRoute> routes) {
  // Requests are a line and a few headers: a body is refused past kMaxBodyBytes (and read, if at
  // all, within the request's deadline).
  server.set_payload_max_length(kMaxBodyBytes);
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
    res.set_content(response.body, response.content_type);  // Debian's cpp-httplib copies (a const reference)
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
}

// httplib's accept loop hands each connection to the task queue; this one runs the task at once on
// the accept thread, where GuardedServer passes the socket to the waiting room without blocking.
class InlineTaskQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

// httplib with its connection handling replaced (see the header): httplib accepts and parses,
// HttpServer::Connections decides which connection gets a thread, and when.
class HttpServer::GuardedServer final : public httplib::Server {
 public:
  explicit GuardedServer(std::function<void(int)> admit) : admit_(std::move(admit)) {}

  // Answers one request read from `stream`. False when the connection is to be closed (a read
  // or write failed, or the request was malformed); `closed` is set when the peer asked to close.
  bool Serve(httplib::Stream& stream, bool close_after, bool& closed) {
    return process_request(stream, close_after, closed, nullptr);
  }

  // httplib listens with a backlog of 5: a burst of connections would wait in SYN_RECV for the
  // handshake's retransmissions (1 s, 3 s, ...), legitimate ones with them. Call after binding.
  void RaiseBacklog() { ::listen(svr_sock_, SOMAXCONN); }

 private:
  // httplib calls this (through InlineTaskQueue) for each accepted socket, on its accept thread.
  bool process_and_close_socket(socket_t sock) override {
    admit_(sock);
    return true;
  }

  const std::function<void(int)> admit_;
};

// The waiting room and the workers. A connection waits (costing a file descriptor, no thread)
// until the head of its next request has arrived in full, then a worker answers it and hands it
// back to wait for the next one.
//
//   accept -> [waiting: idle, then head partly read] -> head complete -> [ready] -> worker
//                ^                                                                    |
//                +----------------------- keep-alive: back to waiting ---------------+
//
// Closed: a connection silent for kIdleTimeout (before its first request, or between requests),
// one whose head is not complete kHeaderTimeout after its first byte or within kMaxHeadBytes, and,
// while kMaxConnections are open, the waiting connection silent the longest, to make room for
// the new one (or the new one, if none is waiting).
class HttpServer::Connections {
 public:
  Connections(int threads, GuardedServer* server) : server_(server) {
    // Non-blocking: a full pipe already wakes the poller, and Admit must never block.
    if (pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
    poller_ = std::thread([this] { Poll(); });
    for (int i = 0; i < std::max(threads, 1); ++i) workers_.emplace_back([this] { Work(); });
  }

  ~Connections() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      // Answers in progress end at once, not at their deadline.
      for (int fd : in_service_) shutdown(fd, SHUT_RDWR);
    }
    ready_cv_.notify_all();
    Wake();
    poller_.join();
    for (std::thread& t : workers_) t.join();
    for (Waiting& w : arrived_) close(w.fd);
    for (Waiting& w : ready_) close(w.fd);
    close(wake_[0]);
    close(wake_[1]);
  }

  // Takes `fd`, a socket just accepted. Never blocks.
  void Admit(int fd) {
    int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    Add(Waiting{fd, "", absl::Now() + kIdleTimeout, false, 0});
  }

 private:
  struct Waiting {
    int fd;
    std::string head;  // what has been read of the next request
    absl::Time deadline;
    bool started;  // its first byte has arrived
    int served;    // requests answered on it so far
  };

  void Wake() {
    const char c = 0;
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &c, 1);
  }

  // A connection to wait on: from the accept thread, or a worker after an answer.
  void Add(Waiting w) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        close(w.fd);
        return;
      }
      if (w.served == 0 && open_ >= kMaxConnections) {
        // Full: the poller makes room, closing the waiting connection silent the longest (this
        // one, if no other is waiting); this one is not counted, the one closed is not uncounted.
        ++evictions_wanted_;
      } else if (w.served == 0) {
        ++open_;
      }
      arrived_.push_back(std::move(w));
    }
    Wake();
  }

  void Close(int fd) {
    shutdown(fd, SHUT_RDWR);
    close(fd);
    std::lock_guard<std::mutex> lock(mu_);
    --open_;
  }

  // The poller thread: reads request heads of waiting connections, times them out, and passes the
  // complete ones to the workers.
  void Poll() {
    std::list<Waiting> waiting;  // in order of arrival: the front has waited longest
    std::vector<pollfd> fds;
    std::vector<std::list<Waiting>::iterator> polled;
    char chunk[4096];
    while (true) {
      int evict = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) break;
        for (Waiting& w : arrived_) waiting.push_back(std::move(w));
        arrived_.clear();
        evict = evictions_wanted_;
        evictions_wanted_ = 0;
      }
      // Make room: the new arrivals counted above are at the back; close from the front the
      // waiting connections that have been silent longest (idle before partial heads).
      for (; evict > 0 && !waiting.empty(); --evict) {
        auto victim = std::find_if(waiting.begin(), waiting.end(), [](const Waiting& w) { return !w.started; });
        if (victim == waiting.end()) victim = waiting.begin();
        close(victim->fd);  // Counted already: the arrival that asked for room was not.
        waiting.erase(victim);
      }
      fds.assign(1, pollfd{wake_[0], POLLIN, 0});
      polled.clear();
      absl::Time next = absl::Now() + absl::Milliseconds(200);
      for (auto it = waiting.begin(); it != waiting.end(); ++it) {
        fds.push_back(pollfd{it->fd, POLLIN, 0});
        polled.push_back(it);
        next = std::min(next, it->deadline);
      }
      poll(fds.data(), fds.size(), MillisUntil(next));
      if (fds[0].revents != 0) {
        [[maybe_unused]] ssize_t drained = ::read(wake_[0], chunk, sizeof(chunk));
      }
      const absl::Time now = absl::Now();
      for (size_t i = 1; i < fds.size(); ++i) {
        auto it = polled[i - 1];
        if (fds[i].revents != 0) {
          const size_t room = kMaxHeadBytes - it->head.size();
          const ssize_t n = recv(it->fd, chunk, std::min(room, sizeof(chunk)), MSG_DONTWAIT);
          if (n > 0) {
            it->head.append(chunk, n);
            if (!it->started) it->deadline = now + kHeaderTimeout;
            it->started = true;
            if (RequestHeadComplete(it->head)) {
              {
                std::lock_guard<std::mutex> lock(mu_);
                ready_.push_back(std::move(*it));
              }
              ready_cv_.notify_one();
              waiting.erase(it);
              continue;
            }
          }
          const bool failed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
          if (failed || it->head.size() >= kMaxHeadBytes || !MayBeHttpRequest(it->head)) {
            Close(it->fd);
            waiting.erase(it);
            continue;
          }
        }
        if (now >= it->deadline) {
          Close(it->fd);
          waiting.erase(it);
        }
      }
    }
    for (Waiting& w : waiting) close(w.fd);
  }

  // A worker thread: answers one ready request at a time.
  void Work() {
    while (true) {
      Waiting w;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
        if (stopping_) return;
        w = std::move(ready_.front());
        ready_.pop_front();
        in_service_.insert(w.fd);
      }
      ConnectionStream stream(w.fd, std::move(w.head), absl::Now() + kRequestTimeout);
      const bool last = w.served + 1 >= kMaxRequestsPerConnection;
      bool closed = false;
      const bool ok = server_->Serve(stream, last, closed);
      {
        std::lock_guard<std::mutex> lock(mu_);
        in_service_.erase(w.fd);
      }
      if (!ok || closed || last) {
        Close(w.fd);
        continue;
      }
      w.head = stream.TakeBuffered();
      w.deadline = absl::Now() + (w.head.empty() ? kIdleTimeout : kHeaderTimeout);
      w.started = !w.head.empty();
      ++w.served;
      if (RequestHeadComplete(w.head)) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          ready_.push_back(std::move(w));
        }
        ready_cv_.notify_one();
      } else {
        Add(std::move(w));
      }
    }
  }

  GuardedServer* const server_;
  int wake_[2] = {-1, -1};
  std::mutex mu_;
  std::condition_variable ready_cv_;
  bool stopping_ = false;
  int open_ = 0;              // connections admitted and not closed by Close()
  int evictions_wanted_ = 0;  // connections the poller is to close to make room
  std::vector<Waiting> arrived_;
  std::deque<Waiting> ready_;
  std::set<int> in_service_;  // connections a worker is answering
  std::thread poller_;
  std::vector<std::thread> workers_;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              std::vector<HttpRoute> routes, int threads) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  HttpServer* self = s.get();
  s->server_ = std::make_unique<GuardedServer>([self](int fd) { self->connections_->Admit(fd); });
  GuardedServer& server = *s->server_;
  s->connections_ = std::make_unique<Connections>(threads, s->server_.get());
  server.new_task_queue = [] { return new InlineTaskQueue(); };
  // Applied by httplib to each accepted socket (SO_SNDTIMEO): a blocking write never outlives it.
  server.set_write_timeout(5, 0);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second process
  // bind the same port and take half the scrapes silently.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  InstallRoutes(server, std::move(routes));

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
  server.RaiseBacklog();
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
  // After the accept thread: nothing admits a connection any more.
  connections_.reset();
}

HttpServer::~HttpServer() { Stop(); }

std::string HttpServer::AnswerForTesting(std::vector<HttpRoute> routes, absl::string_view bytes) {
  GuardedServer server([](int fd) { close(fd); });
  InstallRoutes(server, std::move(routes));
  std::string output;
  for (int served = 0; served < kMaxRequestsPerConnection; ++served) {
    // What the waiting room would pass on: a complete head within kMaxHeadBytes.
    if (!RequestHeadComplete(bytes.substr(0, kMaxHeadBytes))) break;
    MemoryStream stream(bytes);
    bool closed = false;
    const bool ok = server.Serve(stream, served + 1 == kMaxRequestsPerConnection, closed);
    output += stream.output();
    bytes = stream.rest();
    if (!ok || closed) break;
  }
  return output;
}

}  // namespace pstrain
