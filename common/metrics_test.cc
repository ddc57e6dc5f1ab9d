#include "common/metrics.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, CounterRendersWithHelpTypeAndLabels) {
  Registry r;
  r.SetConstantLabels({{"role", "server"}, {"rank", "1"}});
  auto& bytes = r.AddCounter("pstrain_server_received_bytes_total", "Request bytes", {"shard"});
  bytes.With({"0"})->Add(1024);
  bytes.With({"0"})->Add(1);
  bytes.With({"1"})->Increment();
  EXPECT_EQ(r.Render(),
            "# HELP pstrain_server_received_bytes_total Request bytes\n"
            "# TYPE pstrain_server_received_bytes_total counter\n"
            "pstrain_server_received_bytes_total{role=\"server\",rank=\"1\",shard=\"0\"} 1025\n"
            "pstrain_server_received_bytes_total{role=\"server\",rank=\"1\",shard=\"1\"} 1\n");
}

TEST(MetricsTest, CounterNeverGoesDown) {
  Counter c;
  c.Add(2);
  c.Add(-1);
  c.Add(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(c.value(), 2);
}

TEST(MetricsTest, RaiseToMirrorsATotalWithoutCountingItTwice) {
  Counter c;
  std::vector<std::thread> scrapes;
  for (int t = 0; t < 4; ++t) {
    scrapes.emplace_back([&] {
      for (int i = 1; i <= 1000; ++i) c.RaiseTo(i * 0.5);
    });
  }
  for (auto& t : scrapes) t.join();
  EXPECT_EQ(c.value(), 500);
  c.RaiseTo(3);  // lower: a counter never goes down
  EXPECT_EQ(c.value(), 500);
}

TEST(MetricsTest, GaugeWithoutLabelsAndFamiliesWithoutSeriesAreLeftOut) {
  Registry r;
  r.AddGauge("pstrain_unused", "never set", {"x"});
  r.AddGauge("pstrain_live_workers", "Live workers").Get()->Set(3);
  EXPECT_EQ(r.Render(),
            "# HELP pstrain_live_workers Live workers\n"
            "# TYPE pstrain_live_workers gauge\n"
            "pstrain_live_workers 3\n");
}

TEST(MetricsTest, FamiliesDescribeEveryFamilyInOrderWithOrWithoutSeries) {
  Registry r;
  r.AddGauge("pstrain_unused", "never set", {"x"});
  r.AddCounter("pstrain_calls_total", "Calls", {"method", "code"}).With({"Pull", "ok"})->Add(1);
  r.AddHistogram("pstrain_push_seconds", "Push latency", {}, {0.1});
  r.AddCounter("pstrain_calls_total", "Calls", {"method", "code"});  // the same family again
  const std::vector<Registry::FamilyInfo> families = r.Families();
  ASSERT_EQ(families.size(), 3u);
  EXPECT_EQ(families[0].name, "pstrain_unused");
  EXPECT_EQ(families[0].type, "gauge");
  EXPECT_EQ(families[0].help, "never set");
  EXPECT_EQ(families[0].label_names, std::vector<std::string>{"x"});
  EXPECT_EQ(families[1].type, "counter");
  EXPECT_EQ(families[1].label_names, (std::vector<std::string>{"method", "code"}));
  EXPECT_EQ(families[2].type, "histogram");
  EXPECT_TRUE(families[2].label_names.empty());
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndCountMatchesInf) {
  Registry r;
  auto* h = r.AddHistogram("pstrain_push_seconds", "Push latency", {}, {0.001, 0.01, 0.1}).Get();
  h->Observe(0.0005);
  h->Observe(0.001);  // on a bound: counts in that bucket (le is "less or equal")
  h->Observe(0.05);
  h->Observe(7);
  EXPECT_EQ(h->count(), 4u);
  EXPECT_DOUBLE_EQ(h->sum(), 7.0515);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("pstrain_push_seconds_bucket{le=\"0.001\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_push_seconds_bucket{le=\"0.01\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_push_seconds_bucket{le=\"0.1\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_push_seconds_bucket{le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_push_seconds_sum 7.0515\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_push_seconds_count 4\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE pstrain_push_seconds histogram\n"));
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  Registry r;
  r.AddGauge("pstrain_x", "help with \\ and\nnewline", {"tensor"}).With({"a\"b\\c\nd"})->Set(1);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("# HELP pstrain_x help with \\\\ and\\nnewline\n"));
  EXPECT_THAT(text, HasSubstr("pstrain_x{tensor=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST(MetricsTest, SameFamilyAddedTwiceIsShared) {
  Registry r;
  auto& a = r.AddCounter("pstrain_requests_total", "Requests", {"method"});
  auto& b = r.AddCounter("pstrain_requests_total", "Requests", {"method"});
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.With({"Push"}), b.With({"Push"}));
}

TEST(MetricsDeathTest, ProgrammerErrorsAreCaught) {
  Registry r;
  EXPECT_DEATH(r.AddCounter("bad-name", "x"), "bad metric name");
  EXPECT_DEATH(r.AddCounter("pstrain_ok_total", "x", {"le"}), "bad label name");
  r.AddCounter("pstrain_twice_total", "x", {"a"});
  EXPECT_DEATH(r.AddGauge("pstrain_twice_total", "x", {"a"}), "added twice");
  EXPECT_DEATH(r.AddCounter("pstrain_labels_total", "x", {"a"}).With({}), "wrong number of label values");
  EXPECT_DEATH(r.AddHistogram("pstrain_h", "x", {}, {1, 1}), "must increase");
}

TEST(MetricsTest, CollectorsRunBeforeEachRender) {
  Registry r;
  Gauge* g = r.AddGauge("pstrain_age_seconds", "Age").Get();
  int calls = 0;
  r.AddCollector([&] { g->Set(++calls * 1.5); });
  EXPECT_THAT(r.Render(), HasSubstr("pstrain_age_seconds 1.5\n"));
  EXPECT_THAT(r.Render(), HasSubstr("pstrain_age_seconds 3\n"));
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  Registry r;
  Counter* c = r.AddCounter("pstrain_c_total", "c").Get();
  Histogram* h = r.AddHistogram("pstrain_h_seconds", "h", {}, LatencyBuckets()).Get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        c->Add(2);
        h->Observe(0.001);
      }
    });
  }
  std::string text;
  for (int i = 0; i < 20; ++i) text = r.Render();  // renders race with the updates
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 160000);
  EXPECT_EQ(h->count(), 80000u);
  EXPECT_NEAR(h->sum(), 80.0, 1e-6);
}

TEST(MetricsTest, FormatValue) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(123456789012), "123456789012");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(FormatValue(1.0 / 3)), 1.0 / 3);
}

TEST(MetricsTest, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(LatencyBuckets().size(), 22u);
  EXPECT_THAT(Registry().Render(), Not(HasSubstr("#")));
}

}  // namespace
}  // namespace pstrain::metrics
