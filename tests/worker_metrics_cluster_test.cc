// A real worker's Prometheus metrics over HTTP: two pstrain-worker processes with
// --metrics_port=-1 train an ASYNC job with fp16 compression; each is scraped at /metrics once the
// job is over (they linger for it) and its step histograms, counters and staleness must agree with
// one another and with the run summary.
#include <httplib.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace pstrain::testing {
namespace {

// The port of the worker's metrics, from its log line "metrics at http://HOST:PORT/metrics"; 0
// until it is there.
int MetricsPort(const Child& worker) {
  const std::string log = worker.Output();
  const size_t at = log.find("metrics at http://");
  if (at == std::string::npos) return 0;
  const size_t end = log.find("/metrics", at + 18);
  const size_t colon = log.rfind(':', end);
  int port = 0;
  if (end == std::string::npos || colon == std::string::npos || colon < at ||
      !absl::SimpleAtoi(log.substr(colon + 1, end - colon - 1), &port)) {
    return 0;
  }
  return port;
}

// The sum of the series of `name` whose labels contain `labels` (e.g. `phase="wait"`); -1 when
// there is none.
double Value(const std::string& text, const std::string& name, const std::string& labels = "") {
  double sum = -1;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || line.empty() || (line[0] != '{' && line[0] != ' ')) continue;
    const size_t space = line.rfind(' ');
    if (absl::string_view(line.substr(0, space)).find(labels) == absl::string_view::npos) continue;
    double v = 0;
    if (!absl::SimpleAtod(line.substr(space + 1), &v)) continue;
    sum = (sum < 0 ? 0 : sum) + v;
  }
  return sum;
}

TEST(WorkerMetricsClusterTest, ScrapedStepHistogramsAndTrafficAgreeWithTheRun) {
  ManualCluster cluster("worker-metrics");
  cluster.Start(2, 2,
                {"--mode=async", "--epochs=1", "--train_limit=2000", "--test_limit=500", "--batch_size=50",
                 "--compression=fp16", "--seed=3"},
                {}, {"--metrics_port=-1", "--metrics_linger_ms=8000"});
  std::vector<int> ports(2, 0);
  for (int i = 0; i < 200 && (ports[0] == 0 || ports[1] == 0); ++i) {
    for (int w = 0; w < 2; ++w) ports[w] = MetricsPort(*cluster.workers[w]);
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GT(ports[0], 0) << cluster.workers[0]->Output();
  ASSERT_GT(ports[1], 0) << cluster.workers[1]->Output();
  absl::StatusOr<int> code = cluster.scheduler->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok() && *code == 0) << cluster.scheduler->Output();
  const std::string summary = ReadFile(cluster.summary_path());

  double samples = 0;
  for (int w = 0; w < 2; ++w) {
    // The job is over: the worker's last report is in, and it lingers for this scrape.
    httplib::Client client("127.0.0.1", ports[w]);
    httplib::Result res = client.Get("/metrics");
    ASSERT_TRUE(res) << "worker " << w << ": " << httplib::to_string(res.error());
    ASSERT_EQ(res->status, 200);
    const std::string& text = res->body;
    SCOPED_TRACE("worker " + std::to_string(w) + ":\n" + text);
    EXPECT_NE(text.find("role=\"worker\""), std::string::npos);
    const double steps = Value(text, "pstrain_worker_steps_total");
    EXPECT_GT(steps, 0);
    EXPECT_EQ(Value(text, "pstrain_worker_step_duration_seconds_count"), steps);
    for (const char* phase : {"compute", "push", "wait", "pull"}) {
      EXPECT_EQ(Value(text, "pstrain_worker_step_seconds_count", std::string("phase=\"") + phase + "\""), steps);
    }
    // The phases add up to the whole step.
    EXPECT_NEAR(Value(text, "pstrain_worker_step_seconds_sum"), Value(text, "pstrain_worker_step_duration_seconds_sum"),
                1e-6 * steps + 1e-9);
    // ASYNC: one staleness per shard of each push-pull.
    EXPECT_EQ(Value(text, "pstrain_worker_pull_staleness_count"), 2 * steps);
    EXPECT_GT(Value(text, "pstrain_worker_sent_bytes_total", "server=\"0\""), 0);
    EXPECT_GT(Value(text, "pstrain_worker_sent_bytes_total", "server=\"1\""), 0);
    EXPECT_GT(Value(text, "pstrain_worker_received_bytes_total", "server=\"0\""), 0);
    // fp16 sends 2 bytes a float instead of 4: about as many bytes saved as gradient bytes sent.
    const double saved = Value(text, "pstrain_worker_compression_saved_bytes_total");
    EXPECT_GT(saved, 0.3 * Value(text, "pstrain_worker_sent_bytes_total"));
    EXPECT_LT(saved, Value(text, "pstrain_worker_sent_bytes_total"));
    EXPECT_EQ(Value(text, "pstrain_worker_samples_per_second"), 0);  // done training
    EXPECT_GT(Value(text, "process_cpu_seconds_total"), 0);
    samples += Value(text, "pstrain_worker_samples_total");
  }
  // Every training sample once, by one worker or the other.
  EXPECT_EQ(samples, 2000);
  EXPECT_EQ(JsonNumber(summary, "samples"), 2000) << summary;
  for (auto& w : cluster.workers) {
    absl::StatusOr<int> wc = w->Wait(absl::Seconds(30));
    EXPECT_TRUE(wc.ok() && *wc == 0) << w->Output();
  }
}

}  // namespace
}  // namespace pstrain::testing
