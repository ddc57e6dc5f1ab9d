// The HTTP listeners' request handling (common/http_server.h) on arbitrary bytes, as one
// connection delivers them: the check that a request head is complete, httplib's parsing of the
// request line, headers, query and body (Debian's libcpp-httplib, not instrumented: a crash in it
// still counts, its branches do not guide the fuzzer), our routing, and the scheduler dashboard's
// routes (scheduler/dashboard_http.h), which read the path and the `since` query parameter, over a
// small job's scheduler. HttpServer::AnswerForTesting does what a worker thread does with a
// connection, without the socket.
//
// Every answer must be a well-formed HTTP/1.1 status line, and never 500: httplib turns an
// exception in a handler into a 500, and our handlers must answer bad input with 400 or 404.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "fuzz/fuzz_util.h"
#include "glog/logging.h"
#include "scheduler/dashboard_http.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"

namespace {

using pstrain::scheduler::Scheduler;

// A 1-server, 1-worker job's scheduler, made once: the routes only read it.
const Scheduler& Core() {
  static const Scheduler* core = [] {
    pstrain::JobSpec job;
    job.set_num_workers(1);
    job.set_num_servers(1);
    job.set_batch_size(10);
    job.set_epochs(1);
    Scheduler::Options options =
        pstrain::scheduler::test_util::TinyJobOptions(job, 64, 100, 40, 10, [] { return absl::Now(); });
    return Scheduler::Create(std::move(options)).value().release();
  }();
  return *core;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static pstrain::metrics::Registry* registry = new pstrain::metrics::Registry();
  static pstrain::scheduler::DashboardApi* api = new pstrain::scheduler::DashboardApi(&Core(), registry);
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string answer = pstrain::HttpServer::AnswerForTesting(api->Routes(), bytes);
  if (!answer.empty()) {
    CHECK(absl::StartsWith(answer, "HTTP/1.1 ")) << "not an HTTP answer: " << answer.substr(0, 64);
  }
  CHECK(!absl::StrContains(answer, "HTTP/1.1 500 ")) << "a handler failed: " << answer.substr(0, 200);
  return 0;
}
