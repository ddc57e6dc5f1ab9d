// Prometheus metrics of one process: counters, gauges and histograms, kept in a Registry and
// rendered in Prometheus' text exposition format (version 0.0.4) for a scrape of /metrics
// (common/metrics_endpoint.h serves it).
//
// A metric is a family (name, help, type, label names) of series, one per set of label values.
// Callers look a series up once, at set-up, and keep the pointer: updating it is then one or a few
// relaxed atomic operations, safe from any thread and cheap enough for every push and pull.
//
//   metrics::Registry registry;
//   metrics::Counter* bytes = registry.AddCounter("pstrain_server_received_bytes_total",
//                                                 "Request bytes received", {"shard"})
//                                 .With({"0"});
//   bytes->Add(request.ByteSizeLong());
//
// Names follow Prometheus' conventions: snake case, prefix `pstrain_`, base units (`_seconds`,
// `_bytes`), counters end in `_total`. A name or label that breaks the format is a programmer error
// (CHECK). Constant labels (role, rank) go on every series and may be set late, once a role knows
// its rank.
#ifndef PSTRAIN_COMMON_METRICS_H_
#define PSTRAIN_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {
namespace metrics {

// Label values, in the order of the family's label names.
using LabelValues = std::vector<std::string>;
// (name, value) pairs.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up (resets to 0 only when the process restarts).
class Counter {
 public:
  // Adds `v`, which must be >= 0 (a negative amount is ignored: a counter never goes down).
  void Add(double v);
  void Increment() { Add(1); }
  // For a count kept elsewhere (the kernel's CPU time): raises the value to `total` if that is
  // higher, atomically, so two scrapes mirroring it at once cannot add the same increase twice.
  void RaiseTo(double total);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Counts observations into buckets with fixed upper bounds, plus their sum and count. Rendered with
// cumulative `le` buckets, `+Inf` last, as Prometheus expects.
class Histogram {
 public:
  // `bounds`: strictly increasing, finite upper bounds (the +Inf bucket is implicit).
  explicit Histogram(std::vector<double> bounds);

  void Observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Observations in bucket i (not cumulative); i == bounds().size() is the +Inf bucket.
  uint64_t bucket_count(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
};

// Bucket bounds `start`, start*factor, ... (`count` of them): for latencies and sizes.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Latency buckets from 50 us to ~105 s (x2 steps), in seconds.
std::vector<double> LatencyBuckets();

enum class Type { kCounter, kGauge, kHistogram };

// One metric: its series by label values. Series are created on first use and live as long as the
// family (pointers stay valid).
template <typename T>
class Family {
 public:
  // The series with these label values (as many as the family has label names; else CHECK fails).
  T* With(const LabelValues& values);
  // The family's only series, for a family without labels.
  T* Get() { return With({}); }

 private:
  friend class Registry;
  // Appends the HELP and TYPE lines and every series; nothing for a family without series.
  void Render(const std::string& constant_labels, std::string* out) const;
  Family(std::string name, std::string help, Type type, std::vector<std::string> label_names,
         std::vector<double> bounds);

  const std::string name_;
  const std::string help_;
  const Type type_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // histograms only
  mutable absl::Mutex mu_;
  std::map<LabelValues, std::unique_ptr<T>> series_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// The metrics of a process. Thread-safe. Adding a family whose name is taken CHECK-fails, unless it
// is the same kind with the same label names, which returns the existing family (two parts of a
// process may share a metric).
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            const std::vector<std::string>& label_names = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        const std::vector<std::string>& label_names = {});
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                const std::vector<std::string>& label_names, std::vector<double> bounds);

  // Labels put on every series, e.g. {{"role", "server"}, {"rank", "1"}}. Replaces earlier ones.
  void SetConstantLabels(Labels labels);

  // Runs before every Render, in the order added, e.g. to set gauges that are read off other state
  // (a checkpoint's age). Must not call Render.
  void AddCollector(std::function<void()> collect);

  // Every family in the order added, in Prometheus' text format. Families without series are left
  // out.
  std::string Render() const;

  // What a family is, for its documentation (tools/metrics_doc).
  struct FamilyInfo {
    std::string name;
    std::string help;
    std::string type;  // "counter", "gauge" or "histogram"
    std::vector<std::string> label_names;
  };
  // Every family in the order added, with or without series.
  std::vector<FamilyInfo> Families() const;

 private:
  struct Entry {
    std::string name;
    std::string help;
    Type type;
    std::vector<std::string> label_names;
    std::shared_ptr<void> family;  // a Family<T> of the type's T
    // Appends the family's text; the argument is the rendered constant labels ("" or `a="b",...`).
    std::function<void(const std::string&, std::string*)> render;
  };
  template <typename T>
  Family<T>& Add(const std::string& name, const std::string& help, Type type,
                 const std::vector<std::string>& label_names, std::vector<double> bounds);

  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  Labels constant_labels_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

// The text format's number: integers without a fraction, "+Inf", "-Inf", "NaN", else the shortest
// text that reads back as the same double.
std::string FormatValue(double v);
// A label value escaped for the text format (backslash, double quote, newline).
std::string EscapeLabelValue(const std::string& v);

}  // namespace metrics
}  // namespace pstrain

#endif  // PSTRAIN_COMMON_METRICS_H_
