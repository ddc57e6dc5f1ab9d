// The gradient compression codecs (common/compression.h) against memcpy of the same fp32 buffer,
// in one run, for gradients of 1M and 16M floats:
//
//   Memcpy                copy the fp32 gradient (4N bytes)                 the baseline
//   EncodeFp16/Bf16       fp32 -> 16 bits, as a worker does before a push
//   DecodeFp16/Bf16       16 bits -> fp32
//   AccumulateFp16/Bf16   sum += w * decode(x), as a server takes a push in
//   TopK1pct/10pct        TopKCompressor::Compress with k = 1% / 10% of N: residual add, selection,
//                         output sorted by index (the residual carries over between iterations)
//   NthElement1pct        the obvious top-k, for comparison: the same work, but std::nth_element
//                         over all N keys and a sort of the k indices instead of a sampled threshold
//   AccumulateTopK1pct/.. AccumulateTopK of one such push into a dense sum, validation included
//
// The codecs pick their code path by CPU (F16C for fp16, an AVX2 clone for bf16 on x86-64), so the
// figures are those of this machine's path. bytes_per_second counts the dense fp32 gradient, 4N
// per call, for every row, so the ratio to Memcpy reads as "gradients per second through this
// codec, relative to copying them". Counters: `floats` = N, `wire_bytes` = the encoded gradient's
// bytes on the wire (4N uncompressed). Three repetitions each; the table printed at the end divides
// the medians.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/compression.h"

namespace pstrain::bench {
namespace {

constexpr int64_t kSizes[] = {int64_t{1} << 20, int64_t{16} << 20};

// Gradient-like data: Gaussian, with magnitudes around 1e-3 so that fp16 sees normals and some
// subnormals, as real gradients do.
std::vector<float> Gradient(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1e-3f);
  std::vector<float> g(static_cast<size_t>(n));
  for (float& x : g) x = dist(rng);
  return g;
}

void SetCounters(benchmark::State& state, int64_t n, int64_t wire_bytes) {
  state.SetBytesProcessed(state.iterations() * 4 * n);
  state.counters["floats"] = static_cast<double>(n);
  state.counters["wire_bytes"] = static_cast<double>(wire_bytes);
}

Compression Kind(Compression::Kind kind, double ratio = 0.0) {
  Compression c;
  c.kind = kind;
  c.topk_ratio = ratio;
  return c;
}

void BM_Memcpy(benchmark::State& state, int64_t n) {
  const std::vector<float> grad = Gradient(n, 1);
  std::vector<float> dst(static_cast<size_t>(n), 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), grad.data(), static_cast<size_t>(n) * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, n, 4 * n);
}

using EncodeFn = absl::Status (*)(absl::Span<const float>, absl::Span<uint16_t>);
using DecodeFn = absl::Status (*)(absl::Span<const uint16_t>, absl::Span<float>);
using AccumulateFn = absl::Status (*)(absl::Span<const uint16_t>, float, absl::Span<float>);

void BM_Encode(benchmark::State& state, int64_t n, EncodeFn encode) {
  const std::vector<float> grad = Gradient(n, 1);
  std::vector<uint16_t> wire(static_cast<size_t>(n));
  absl::Status status;
  for (auto _ : state) {
    status = encode(grad, absl::MakeSpan(wire));
    benchmark::DoNotOptimize(wire.data());
    benchmark::ClobberMemory();
  }
  if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  SetCounters(state, n, 2 * n);
}

void BM_Decode(benchmark::State& state, int64_t n, EncodeFn encode, DecodeFn decode) {
  const std::vector<float> grad = Gradient(n, 1);
  std::vector<uint16_t> wire(static_cast<size_t>(n));
  std::vector<float> dst(static_cast<size_t>(n));
  absl::Status status = encode(grad, absl::MakeSpan(wire));
  for (auto _ : state) {
    if (!status.ok()) break;
    status = decode(wire, absl::MakeSpan(dst));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  SetCounters(state, n, 2 * n);
}

void BM_Accumulate(benchmark::State& state, int64_t n, EncodeFn encode, AccumulateFn accumulate) {
  const std::vector<float> grad = Gradient(n, 1);
  std::vector<uint16_t> wire(static_cast<size_t>(n));
  std::vector<float> sum(static_cast<size_t>(n), 0.0f);
  absl::Status status = encode(grad, absl::MakeSpan(wire));
  for (auto _ : state) {
    if (!status.ok()) break;
    status = accumulate(wire, 0.5f, absl::MakeSpan(sum));
    benchmark::DoNotOptimize(sum.data());
    benchmark::ClobberMemory();
  }
  if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  SetCounters(state, n, 2 * n);
}

void BM_TopK(benchmark::State& state, int64_t n, double ratio) {
  const std::vector<float> grad = Gradient(n, 1);
  absl::StatusOr<std::unique_ptr<TopKCompressor>> compressor = TopKCompressor::Create(n);
  if (!compressor.ok()) {
    state.SkipWithError(compressor.status().ToString().c_str());
    return;
  }
  const int64_t k = TopKCount(ratio, n);
  SparseGradient out;
  absl::Status status;
  for (auto _ : state) {
    status = (*compressor)->Compress(grad, k, &out);
    if (!status.ok()) break;
    benchmark::DoNotOptimize(out.indices.data());
    benchmark::ClobberMemory();
  }
  if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  if (static_cast<int64_t>(out.indices.size()) != k) {
    state.SkipWithError(absl::StrCat("sent ", out.indices.size(), " entries, expected ", k).c_str());
  }
  SetCounters(state, n, WireBytes(Kind(Compression::kTopK, ratio), n));
}

// What Compress would cost without the sampled threshold: the same residual add, keys for all n
// entries, nth_element over them, then a sort of the k selected indices.
void BM_NthElement(benchmark::State& state, int64_t n, double ratio) {
  const std::vector<float> grad = Gradient(n, 1);
  std::vector<float> residual(static_cast<size_t>(n), 0.0f);
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  const int64_t k = TopKCount(ratio, n);
  SparseGradient out;
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) {
      residual[i] += grad[i];
      uint32_t bits;
      std::memcpy(&bits, &residual[i], sizeof(bits));
      keys[i] = (static_cast<uint64_t>(bits & 0x7fffffffu) << 32) | static_cast<uint32_t>(~i);
    }
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<>());
    out.indices.resize(static_cast<size_t>(k));
    out.values.resize(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) out.indices[j] = ~static_cast<uint32_t>(keys[j]);
    std::sort(out.indices.begin(), out.indices.end());
    for (int64_t j = 0; j < k; ++j) {
      out.values[j] = residual[out.indices[j]];
      residual[out.indices[j]] = 0.0f;
    }
    benchmark::DoNotOptimize(out.indices.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, n, WireBytes(Kind(Compression::kTopK, ratio), n));
}

void BM_AccumulateTopK(benchmark::State& state, int64_t n, double ratio) {
  const std::vector<float> grad = Gradient(n, 1);
  absl::StatusOr<std::unique_ptr<TopKCompressor>> compressor = TopKCompressor::Create(n);
  SparseGradient push;
  absl::Status status =
      compressor.ok() ? (*compressor)->Compress(grad, TopKCount(ratio, n), &push) : compressor.status();
  std::vector<float> sum(static_cast<size_t>(n), 0.0f);
  for (auto _ : state) {
    if (!status.ok()) break;
    status = AccumulateTopK(push.indices, push.values, 0.5f, absl::MakeSpan(sum));
    benchmark::DoNotOptimize(sum.data());
    benchmark::ClobberMemory();
  }
  if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  SetCounters(state, n, WireBytes(Kind(Compression::kTopK, ratio), n));
}

std::string SizeName(int64_t n) { return absl::StrCat(n >> 20, "M"); }

// Registers every benchmark; returns the row names (the part before "/size") in order.
std::vector<std::string> RegisterAll() {
  std::vector<std::string> kinds;
  for (int64_t n : kSizes) {
    auto add = [&](const std::string& kind, auto function, auto... args) {
      if (n == kSizes[0]) kinds.push_back(kind);
      benchmark::RegisterBenchmark((kind + "/" + SizeName(n)).c_str(), function, n, args...)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.2)
          ->Repetitions(3)
          ->ReportAggregatesOnly(true);
    };
    add("Memcpy", BM_Memcpy);
    add("EncodeFp16", BM_Encode, EncodeFp16);
    add("DecodeFp16", BM_Decode, EncodeFp16, DecodeFp16);
    add("AccumulateFp16", BM_Accumulate, EncodeFp16, AccumulateFp16);
    add("EncodeBf16", BM_Encode, EncodeBf16);
    add("DecodeBf16", BM_Decode, EncodeBf16, DecodeBf16);
    add("AccumulateBf16", BM_Accumulate, EncodeBf16, AccumulateBf16);
    add("TopK1pct", BM_TopK, 0.01);
    add("TopK10pct", BM_TopK, 0.1);
    add("NthElement1pct", BM_NthElement, 0.01);
    add("AccumulateTopK1pct", BM_AccumulateTopK, 0.01);
    add("AccumulateTopK10pct", BM_AccumulateTopK, 0.1);
  }
  return kinds;
}

// The console output, plus the medians' bytes/s kept by (kind, size) for the ratio table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "median") continue;
      const std::string& name = run.run_name.function_name;  // "Kind/Size"
      const size_t slash = name.find('/');
      auto bps = run.counters.find("bytes_per_second");
      auto wire = run.counters.find("wire_bytes");
      auto floats = run.counters.find("floats");
      if (slash == std::string::npos || bps == run.counters.end()) continue;
      Cell& cell = cells_[{name.substr(0, slash), name.substr(slash + 1)}];
      cell.bytes_per_second = bps->second.value;
      if (wire != run.counters.end() && floats != run.counters.end() && floats->second.value > 0) {
        cell.wire_fraction = wire->second.value / (4 * floats->second.value);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // A Markdown table: each row's bytes/s over Memcpy's at the same size (> 1: faster than
  // copying the fp32 gradient), and its wire bytes as a fraction of fp32's.
  void PrintRatios(const std::vector<std::string>& kinds) {
    std::ostream& out = GetOutputStream();
    std::vector<std::string> sizes;
    for (int64_t n : kSizes) sizes.push_back(SizeName(n));
    out << "\nThroughput relative to memcpy of the same fp32 gradient (medians, same run):\n\n";
    out << absl::StrFormat("| %-19s | %-9s |", "codec", "wire/fp32");
    for (const std::string& s : sizes) out << absl::StrFormat(" %-12s |", "x memcpy " + s);
    out << "\n|" << std::string(21, '-') << "|" << std::string(11, '-') << "|";
    for (size_t i = 0; i < sizes.size(); ++i) out << std::string(14, '-') << "|";
    out << "\n";
    for (const std::string& kind : kinds) {
      double wire_fraction = -1.0;
      std::string row;
      for (const std::string& size : sizes) {
        auto it = cells_.find({kind, size});
        auto base = cells_.find({"Memcpy", size});
        if (it == cells_.end() || base == cells_.end() || base->second.bytes_per_second <= 0) {
          absl::StrAppend(&row, absl::StrFormat(" %-12s |", "-"));
          continue;
        }
        wire_fraction = it->second.wire_fraction;
        const double ratio = it->second.bytes_per_second / base->second.bytes_per_second;
        absl::StrAppend(&row, absl::StrFormat(" %-12.3f |", ratio));
      }
      if (wire_fraction < 0) continue;  // filtered out
      out << absl::StrFormat("| %-19s | %-9.4f |", kind, wire_fraction) << row << "\n";
    }
    out.flush();
  }

 private:
  struct Cell {
    double bytes_per_second = 0.0;
    double wire_fraction = -1.0;
  };
  std::map<std::pair<std::string, std::string>, Cell> cells_;
};

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  const std::vector<std::string> kinds = pstrain::bench::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  pstrain::bench::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios(kinds);
  benchmark::Shutdown();
  return 0;
}
