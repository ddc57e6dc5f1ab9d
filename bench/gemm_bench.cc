// The GEMMs the models run, per layer and pass, on every backend this machine has: the CPU
// (OpenBLAS) always, and with a CUDA device cuBLAS in FP32 and in TF32. Rows:
//
//   <backend>/<layer>/<pass>/b<batch>   one Gemm of the layer's shape (MLP and fc layers at batch
//                                       64 and 256; conv layers per image, as Conv2d runs them)
//   <backend>/reference                 a large square GEMM: what the backend reaches when the
//                                       shape is no limit (4096^3 on a GPU, 1024^3 on the CPU)
//
// Passes: fwd  y = x W             (conv: W col)
//         dw   dW = x^T dy         (conv: dy col^T)
//         dx   dx = dy W^T         (conv: dcol = W^T dy)
// Counters: GFLOP/s (2mnk per GEMM) and of_reference, the row's GFLOP/s over its backend's
// reference row, so the table reads as "how much of the device a layer's GEMM can use". GPU rows
// queue kGpuRepeats GEMMs and then synchronize, so they time the GEMMs and not one launch plus one
// wait each. Without a CUDA device the GPU rows are left out (with a message on stderr).
#include <benchmark/benchmark.h>
#include <glog/logging.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/backend.h"
#include "model/cpu_backend.h"
#include "model/cuda/cuda_backend.h"

namespace pstrain::bench {
namespace {

using model::Backend;
using model::BackendBuffer;

constexpr int kGpuRepeats = 20;

struct GemmShape {
  std::string name;  // layer/pass/batch
  bool trans_a, trans_b;
  int m, n, k;
};

// The per-layer shapes of model/mlp.cc, model/cnn.cc, model/linear.cc and model/conv2d.cc.
std::vector<GemmShape> ModelShapes() {
  std::vector<GemmShape> shapes;
  struct Dense {
    const char* name;
    int in, out;
  };
  for (const Dense& d : {Dense{"mlp.fc1", 784, 256}, Dense{"mlp.fc2", 256, 128}, Dense{"mlp.fc3", 128, 10},
                         Dense{"cnn.fc1", 3136, 128}, Dense{"cnn.fc2", 128, 10}}) {
    for (int batch : {64, 256}) {
      const std::string suffix = absl::StrCat("/b", batch);
      shapes.push_back({absl::StrCat(d.name, "/fwd", suffix), false, false, batch, d.out, d.in});
      shapes.push_back({absl::StrCat(d.name, "/dw", suffix), true, false, d.in, d.out, batch});
      shapes.push_back({absl::StrCat(d.name, "/dx", suffix), false, true, batch, d.in, d.out});
    }
  }
  struct Conv {
    const char* name;
    int out_c, rows, pixels;  // W {out_c, rows}, col {rows, pixels}
  };
  for (const Conv& c : {Conv{"cnn.conv1", 32, 25, 784}, Conv{"cnn.conv2", 64, 800, 196}}) {
    shapes.push_back({absl::StrCat(c.name, "/fwd/image"), false, false, c.out_c, c.pixels, c.rows});
    shapes.push_back({absl::StrCat(c.name, "/dw/image"), false, true, c.out_c, c.rows, c.pixels});
    shapes.push_back({absl::StrCat(c.name, "/dx/image"), true, false, c.rows, c.pixels, c.out_c});
  }
  return shapes;
}

struct Device {
  std::string name;
  std::unique_ptr<Backend> backend;
  int repeats;         // GEMMs per timed iteration
  int reference_side;  // the reference row's square size
  double reference_gflops = 0;
};

// Operands for one shape in backend memory, random in [-1, 1].
struct Operands {
  explicit Operands(Backend* b) : a(b), b(b), c(b) {}
  BackendBuffer<float> a, b, c;
};

Operands MakeOperands(Backend* backend, const GemmShape& s) {
  Operands ops(backend);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto fill = [&](BackendBuffer<float>* buffer, int64_t count) {
    std::vector<float> host(count);
    for (float& x : host) x = dist(rng);
    CHECK(buffer->Reserve(count).ok());
    CHECK(backend->Upload(host.data(), count * sizeof(float), buffer->data()).ok());
  };
  fill(&ops.a, static_cast<int64_t>(s.m) * s.k);
  fill(&ops.b, static_cast<int64_t>(s.k) * s.n);
  fill(&ops.c, static_cast<int64_t>(s.m) * s.n);
  return ops;
}

// Runs `iterations` x repeats GEMMs and returns GFLOP/s.
double TimeGemms(Device* device, const GemmShape& s, Operands* ops, int64_t iterations) {
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    for (int r = 0; r < device->repeats; ++r) {
      device->backend->Gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, ops->a.data(), ops->b.data(), 0.0f,
                            ops->c.data());
    }
  }
  CHECK(device->backend->Synchronize().ok());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * s.m * s.n * s.k * device->repeats * iterations / seconds / 1e9;
}

GemmShape ReferenceShape(const Device& device) {
  const int side = device.reference_side;
  return {"reference", false, false, side, side, side};
}

// Measured once before the benchmarks, so every row can be divided by it.
void MeasureReference(Device* device) {
  const GemmShape s = ReferenceShape(*device);
  Operands ops = MakeOperands(device->backend.get(), s);
  TimeGemms(device, s, &ops, 1);  // warm-up: cuBLAS picks its kernel, OpenBLAS its threads
  device->reference_gflops = TimeGemms(device, s, &ops, 3);
}

void BM_Gemm(benchmark::State& state, Device* device, GemmShape s) {
  Operands ops = MakeOperands(device->backend.get(), s);
  TimeGemms(device, s, &ops, 1);                                       // warm-up
  const double gflop = 2.0 * s.m * s.n * s.k * device->repeats / 1e9;  // per iteration
  double seconds = 0;
  for (auto _ : state) {
    // One timed iteration = `repeats` GEMMs and a Synchronize.
    const double t = gflop / TimeGemms(device, s, &ops, 1);
    state.SetIterationTime(t);
    seconds += t;
  }
  const double gflops = gflop * static_cast<double>(state.iterations()) / seconds;
  state.counters["GFLOP/s"] = gflops;
  state.counters["of_reference"] = gflops / device->reference_gflops;
  state.counters["gemms_per_iter"] = device->repeats;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  using namespace pstrain::bench;
  google::InitGoogleLogging(argv[0]);
  benchmark::Initialize(&argc, argv);

  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<Device>(Device{"cpu", pstrain::model::NewCpuBackend(), 1, 1024}));
  if (pstrain::model::CudaDeviceCount() > 0) {
    for (bool tf32 : {false, true}) {
      pstrain::model::CudaOptions options;
      options.allow_tf32 = tf32;
      auto backend = pstrain::model::NewCudaBackend(options);
      CHECK(backend.ok()) << backend.status();
      devices.push_back(
          std::make_unique<Device>(Device{tf32 ? "cuda_tf32" : "cuda_fp32", std::move(*backend), kGpuRepeats, 4096}));
    }
  } else {
    std::cerr << "gemm_bench: no CUDA device"
              << (pstrain::model::CudaBuilt() ? "" : " (this build has no CUDA backend)") << ": CPU rows only\n";
  }

  for (const std::unique_ptr<Device>& device : devices) {
    MeasureReference(device.get());
    std::vector<GemmShape> shapes = {ReferenceShape(*device)};
    for (const GemmShape& s : ModelShapes()) shapes.push_back(s);
    for (const GemmShape& s : shapes) {
      benchmark::RegisterBenchmark(absl::StrCat(device->name, "/", s.name).c_str(), BM_Gemm, device.get(), s)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
