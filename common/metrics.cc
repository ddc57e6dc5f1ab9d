#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {
namespace metrics {
namespace {

// Atomic add for doubles (std::atomic<double>::fetch_add is C++20).
void AtomicAdd(std::atomic<double>* a, double v) {
  double old = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

bool ValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return name.rfind("__", 0) != 0;
}

const char* TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"}` from the constant labels, the series' labels and an extra one (a histogram's
// `le`); "" when there are none.
std::string LabelSet(const std::string& constant, const std::vector<std::string>& names, const LabelValues& values,
                     const std::string& extra = "") {
  std::string out = constant;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!out.empty()) out += ',';
    absl::StrAppend(&out, names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra.empty()) {
    if (!out.empty()) out += ',';
    out += extra;
  }
  return out.empty() ? out : absl::StrCat("{", out, "}");
}

// Backslash and newline escaped, and the double quote too when `quote` (label values; HELP text
// keeps its quotes).
std::string Escape(const std::string& text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) { return Escape(help, /*quote=*/false); }

void RenderSeries(const std::string& name, const std::string& labels, const Counter& c, std::string* out) {
  absl::StrAppend(out, name, labels, " ", FormatValue(c.value()), "\n");
}
void RenderSeries(const std::string& name, const std::string& labels, const Gauge& g, std::string* out) {
  absl::StrAppend(out, name, labels, " ", FormatValue(g.value()), "\n");
}

}  // namespace

void Counter::Add(double v) {
  if (!(v > 0)) return;  // also drops NaN
  AtomicAdd(&value_, v);
}

void Counter::RaiseTo(double total) {
  double old = value_.load(std::memory_order_relaxed);
  while (total > old && !value_.compare_exchange_weak(old, total, std::memory_order_relaxed)) {
  }
}

void Gauge::Add(double v) { AtomicAdd(&value_, v); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    CHECK(std::isfinite(bounds_[i])) << "histogram bound " << i << " is not finite";
    CHECK(i == 0 || bounds_[i] > bounds_[i - 1]) << "histogram bounds must increase (bound " << i << ")";
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // Bucket i counts values in (bounds[i-1], bounds[i]]; NaN lands in +Inf.
  const size_t i = std::isnan(v)
                       ? bounds_.size()
                       : static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, v);
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) n += bucket_count(i);
  return n;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  CHECK(start > 0 && factor > 1 && count > 0) << "bad exponential buckets";
  std::vector<double> out;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) out.push_back(b);
  return out;
}

std::vector<double> LatencyBuckets() { return ExponentialBuckets(50e-6, 2, 22); }

template <typename T>
Family<T>::Family(std::string name, std::string help, Type type, std::vector<std::string> label_names,
                  std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

template <typename T>
T* Family<T>::With(const LabelValues& values) {
  CHECK_EQ(values.size(), label_names_.size()) << name_ << ": wrong number of label values";
  absl::MutexLock lock(&mu_);
  auto& slot = series_[values];
  if (slot == nullptr) {
    if constexpr (std::is_same_v<T, Histogram>) {
      slot = std::make_unique<Histogram>(bounds_);
    } else {
      slot = std::make_unique<T>();
    }
  }
  return slot.get();
}

template <typename T>
void Family<T>::Render(const std::string& constant_labels, std::string* out) const {
  absl::MutexLock lock(&mu_);
  if (series_.empty()) return;
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n# TYPE ", name_, " ", TypeName(type_), "\n");
  for (const auto& [values, series] : series_) {
    if constexpr (std::is_same_v<T, Histogram>) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= bounds_.size(); ++i) {
        cumulative += series->bucket_count(i);
        const std::string le =
            absl::StrCat("le=\"", i == bounds_.size() ? std::string("+Inf") : FormatValue(bounds_[i]), "\"");
        absl::StrAppend(out, name_, "_bucket", LabelSet(constant_labels, label_names_, values, le), " ", cumulative,
                        "\n");
      }
      const std::string labels = LabelSet(constant_labels, label_names_, values);
      // The count is the +Inf bucket's, so the two agree even while observations land.
      absl::StrAppend(out, name_, "_sum", labels, " ", FormatValue(series->sum()), "\n", name_, "_count", labels, " ",
                      cumulative, "\n");
    } else {
      RenderSeries(name_, LabelSet(constant_labels, label_names_, values), *series, out);
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

template <typename T>
Family<T>& Registry::Add(const std::string& name, const std::string& help, Type type,
                         const std::vector<std::string>& label_names, std::vector<double> bounds) {
  CHECK(ValidName(name, /*allow_colon=*/true)) << "bad metric name \"" << name << "\"";
  for (const std::string& label : label_names) {
    CHECK(ValidName(label, /*allow_colon=*/false) && label != "le") << name << ": bad label name \"" << label << "\"";
  }
  absl::MutexLock lock(&mu_);
  for (const Entry& e : entries_) {
    if (e.name != name) continue;
    CHECK(e.type == type && e.label_names == label_names) << "metric " << name << " added twice, differently";
    return *static_cast<Family<T>*>(e.family.get());
  }
  std::shared_ptr<Family<T>> family(new Family<T>(name, help, type, label_names, std::move(bounds)));
  Family<T>* raw = family.get();
  entries_.push_back(Entry{name, help, type, label_names, family,
                           [raw](const std::string& constant, std::string* out) { raw->Render(constant, out); }});
  return *raw;
}

CounterFamily& Registry::AddCounter(const std::string& name, const std::string& help,
                                    const std::vector<std::string>& label_names) {
  return Add<Counter>(name, help, Type::kCounter, label_names, {});
}

GaugeFamily& Registry::AddGauge(const std::string& name, const std::string& help,
                                const std::vector<std::string>& label_names) {
  return Add<Gauge>(name, help, Type::kGauge, label_names, {});
}

HistogramFamily& Registry::AddHistogram(const std::string& name, const std::string& help,
                                        const std::vector<std::string>& label_names, std::vector<double> bounds) {
  Histogram check(bounds);  // CHECKs the bounds now, not at the first series
  return Add<Histogram>(name, help, Type::kHistogram, label_names, std::move(bounds));
}

void Registry::SetConstantLabels(Labels labels) {
  for (const auto& [name, value] : labels) {
    CHECK(ValidName(name, /*allow_colon=*/false) && name != "le") << "bad constant label name \"" << name << "\"";
  }
  absl::MutexLock lock(&mu_);
  constant_labels_ = std::move(labels);
}

void Registry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Render() const {
  std::vector<std::function<void()>> collectors;
  std::vector<std::function<void(const std::string&, std::string*)>> renders;
  std::string constant;
  {
    absl::MutexLock lock(&mu_);
    collectors = collectors_;
    for (const Entry& e : entries_) renders.push_back(e.render);
    for (const auto& [name, value] : constant_labels_) {
      if (!constant.empty()) constant += ',';
      absl::StrAppend(&constant, name, "=\"", EscapeLabelValue(value), "\"");
    }
  }
  // Outside the lock: a collector may add series or families.
  for (const auto& collect : collectors) collect();
  std::string out;
  for (const auto& render : renders) render(constant, &out);
  return out;
}

std::vector<Registry::FamilyInfo> Registry::Families() const {
  absl::MutexLock lock(&mu_);
  std::vector<FamilyInfo> families;
  for (const Entry& e : entries_) families.push_back(FamilyInfo{e.name, e.help, TypeName(e.type), e.label_names});
  return families;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  char buf[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string EscapeLabelValue(const std::string& v) { return Escape(v, /*quote=*/true); }

}  // namespace metrics
}  // namespace pstrain
