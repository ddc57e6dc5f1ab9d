// The HTTP server and /metrics over a real socket on loopback.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/time/clock.h"

#include "common/metrics_endpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(HttpServerTest, ServesRoutesOverLoopback) {
  metrics::Registry registry;
  registry.AddCounter("pstrain_test_total", "A test counter").Get()->Add(42);
  AddProcessMetrics(&registry);
  std::vector<HttpRoute> more = {{"/api/echo", false,
                                  [](const HttpRequest& r) {
                                    HttpResponse out;
                                    out.content_type = "application/json";
                                    out.body =
                                        "{\"q\":\"" + (r.params.count("q") ? r.params.at("q") : std::string()) + "\"}";
                                    return out;
                                  }},
                                 {"/static/", true, [](const HttpRequest& r) {
                                    HttpResponse out;
                                    out.body = r.path;
                                    return out;
                                  }}};
  auto server = ServeMetrics(&registry, "127.0.0.1", 0, more);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), kPrometheusContentType);
  EXPECT_THAT(metrics->body, HasSubstr("pstrain_test_total 42\n"));
  EXPECT_THAT(metrics->body, HasSubstr("process_resident_memory_bytes "));
  EXPECT_THAT(metrics->body, HasSubstr("process_start_time_seconds "));

  auto echo = client.Get("/api/echo?q=abc");
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->body, "{\"q\":\"abc\"}");
  auto file = client.Get("/static/app.js");
  ASSERT_TRUE(file);
  EXPECT_EQ(file->body, "/static/app.js");

  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_THAT(missing->body, HasSubstr("/nope"));
  auto post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);

  (*server)->Stop();
  (*server)->Stop();  // idempotent
  EXPECT_FALSE(client.Get("/metrics"));
}

TEST(HttpServerTest, AnswersPipelinedRequestsAndNothingBeforeAWholeHead) {
  std::vector<HttpRoute> routes = {{"/a", false, [](const HttpRequest& r) {
                                      HttpResponse out;
                                      out.body = "a:" + (r.params.count("q") ? r.params.at("q") : std::string());
                                      return out;
                                    }}};
  const std::string two =
      HttpServer::AnswerForTesting(routes, "GET /a?q=1 HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(two, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(two, HasSubstr("a:1"));
  EXPECT_THAT(two, HasSubstr("HTTP/1.1 404 Not Found\r\n"));
  // A head cut short gets nothing (a socket's would wait, then be closed at its deadline).
  EXPECT_EQ(HttpServer::AnswerForTesting(routes, "GET /a HTTP/1.1\r\nHost: x\r\n"), "");
  EXPECT_THAT(HttpServer::AnswerForTesting(routes, "POST /a HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"),
              ::testing::StartsWith("HTTP/1.1 405 "));
}

TEST(MetricsAddressTest, AWildcardBindIsDialledAtTheAdvertisedHost) {
  EXPECT_EQ(MetricsAddress("10.0.0.5", "pod-a", 9400), "10.0.0.5:9400");  // bound to one address: that
  EXPECT_EQ(MetricsAddress("0.0.0.0", "pod-a", 9400), "pod-a:9400");
  EXPECT_EQ(MetricsAddress("", "", 9400), "127.0.0.1:9400");
  EXPECT_EQ(MetricsAddress("::", "0.0.0.0", 9400), "127.0.0.1:9400");  // both wildcards
  EXPECT_EQ(MetricsAddress("[::]", "fd00::1", 9400), "[fd00::1]:9400");
}

// A connection whose first bytes cannot start an HTTP request (here a TLS ClientHello's record
// header, as a gRPC client dialling the wrong port sends) is closed at once, not held for the
// header deadline (5 s).
TEST(HttpServerTest, ClosesAConnectionThatIsNotHttpAtOnce) {
  metrics::Registry registry;
  auto server = ServeMetrics(&registry, "127.0.0.1", 0, {});
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};
  ASSERT_EQ(send(fd, hello, sizeof(hello), 0), static_cast<ssize_t>(sizeof(hello)));
  timeval two_seconds{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &two_seconds, sizeof(two_seconds));
  const absl::Time start = absl::Now();
  char byte;
  const ssize_t n = recv(fd, &byte, 1, 0);
  EXPECT_EQ(n, 0) << "expected the server to close the connection";
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  close(fd);
  // A real request still works.
  httplib::Client client("127.0.0.1", (*server)->port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

TEST(HttpServerTest, PortInUseIsUnavailable) {
  metrics::Registry registry;
  auto first = ServeMetrics(&registry, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  auto second = ServeMetrics(&registry, "127.0.0.1", (*first)->port());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("127.0.0.1:"));
}

}  // namespace
}  // namespace pstrain
