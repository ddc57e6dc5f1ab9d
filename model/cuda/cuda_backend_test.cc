// The CUDA backend against the CPU backend (the oracle): every kernel, every layer forward and
// backward, the Mlp and Cnn gradients and a short training run, on the same random data. Skips
// without a CUDA device, so it passes (as skipped) on machines and builds without one.
//
// Tolerances: GEMM paths in FP32 within 1e-5 of the largest magnitude (cuBLAS and OpenBLAS sum in
// different orders), 2e-3 with TF32 (inputs rounded to 10 mantissa bits); whole models see
// GradientTolerance below, loss curves 1e-3 (FP32) and 5e-2 (TF32). Kernels without a GEMM (Fill,
// AddBias, ColumnSums, ReLU, Im2Col, Col2Im, max pooling) must match exactly: the GPU kernels add
// in the CPU's order.
#include "model/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend.h"
#include "model/cnn.h"
#include "model/conv2d.h"
#include "model/cpu_backend.h"
#include "model/linear.h"
#include "model/max_pool2d.h"
#include "model/mlp.h"
#include "model/relu.h"
#include "model/softmax_xent.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using testutil::DistinctValues;
using testutil::MakeWindow;
using testutil::RandomVector;
using testutil::ToBackend;
using testutil::ToHost;

constexpr float kFp32Tolerance = 1e-5f;
constexpr float kTf32Tolerance = 2e-3f;

std::string Describe(const Window2d& g) {
  return "window c" + std::to_string(g.channels) + " " + std::to_string(g.height) + "x" + std::to_string(g.width) +
         " k" + std::to_string(g.kernel) + " s" + std::to_string(g.stride) + " p" + std::to_string(g.padding);
}

// Values that are small integers: many exact ties, for the first-on-ties rules.
std::vector<float> TiedValues(int64_t n, uint32_t seed) {
  std::vector<float> v = RandomVector(n, seed, -3.0f, 3.0f);
  for (float& x : v) x = std::round(x);
  return v;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Every element within tolerance * (1 + the largest |want|).
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double bound = tolerance * (1.0 + MaxAbs(want));
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(static_cast<double>(got[i]) - want[i]) > bound && reported++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": gpu " << got[i] << ", cpu " << want[i] << " (bound " << bound
                    << ")";
    }
  }
  EXPECT_EQ(reported, 0) << what << ": elements out of tolerance";
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::unique_ptr<Backend>> gpu = NewCudaBackend(CudaOptions());
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    CudaOptions tf32;
    tf32.allow_tf32 = true;
    absl::StatusOr<std::unique_ptr<Backend>> gpu_tf32 = NewCudaBackend(tf32);
    ASSERT_TRUE(gpu_tf32.ok()) << gpu_tf32.status();
    gpu_tf32_ = std::move(*gpu_tf32);
  }

  void TearDown() override {
    for (const std::unique_ptr<Backend>* gpu : {&gpu_, &gpu_tf32_}) {
      if (*gpu != nullptr) {
        EXPECT_TRUE((*gpu)->Synchronize().ok());
      }
    }
  }

  // Runs `run` on the CPU and on both GPU backends and compares what it returns: FP32 within
  // `fp32`, TF32 within `tf32`.
  void Compare(const std::function<std::vector<float>(Backend*)>& run, double fp32, double tf32,
               const std::string& what) {
    const std::vector<float> want = run(cpu_.get());
    ExpectClose(run(gpu_.get()), want, fp32, what + " (fp32)");
    ExpectClose(run(gpu_tf32_.get()), want, tf32, what + " (tf32)");
  }
  // The same for results that must be identical everywhere.
  template <typename T>
  void CompareExactly(const std::function<std::vector<T>(Backend*)>& run, const std::string& what) {
    const std::vector<T> want = run(cpu_.get());
    EXPECT_EQ(run(gpu_.get()), want) << what;
  }

  std::unique_ptr<Backend> cpu_ = NewCpuBackend();
  std::unique_ptr<Backend> gpu_;
  std::unique_ptr<Backend> gpu_tf32_;
};

// ---- Memory and errors --------------------------------------------------------------------------

TEST_F(CudaBackendTest, NameAndEmptyAllocation) {
  EXPECT_EQ(gpu_->name(), "cuda:0");
  absl::StatusOr<void*> none = gpu_->Allocate(0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  gpu_->Free(nullptr);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaBackendTest, CopiesLargerThanTheStagingBufferRoundTrip) {
  // 40 MiB: more than one staging chunk, and not a multiple of one.
  const int64_t n = (int64_t{40} << 20) / 4 + 12345;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 100003) - 7.5f;
  BackendBuffer<float> buffer = ToBackend(gpu_.get(), host);
  EXPECT_EQ(ToHost(gpu_.get(), buffer, n), host);
  // A part of it, at an offset.
  std::vector<float> part(1000);
  ASSERT_TRUE(gpu_->Download(buffer.data() + 5000, part.size() * 4, part.data()).ok());
  EXPECT_EQ(part, std::vector<float>(host.begin() + 5000, host.begin() + 6000));
}

TEST_F(CudaBackendTest, UploadWaitsForQueuedKernelsThatReadItsDestination) {
  // y = x * w is queued, then x is overwritten: y must be computed from the old x.
  const int m = 512, k = 512, n = 512;
  const std::vector<float> x0 = RandomVector(m * k, 1), w = RandomVector(k * n, 2);
  auto run = [&](Backend* b) {
    BackendBuffer<float> x = ToBackend(b, x0), bw = ToBackend(b, w), y(b);
    EXPECT_TRUE(y.Reserve(m * n).ok());
    for (int i = 0; i < 20; ++i) b->Gemm(false, false, m, n, k, 1.0f, x.data(), bw.data(), 0.0f, y.data());
    EXPECT_TRUE(b->Upload(std::vector<float>(m * k, 0.0f).data(), m * k * 4, x.data()).ok());
    return ToHost(b, y, m * n);
  };
  ExpectClose(run(gpu_.get()), run(cpu_.get()), kFp32Tolerance, "y");
}

TEST_F(CudaBackendTest, AllocatingTooMuchIsResourceExhaustedAndTheBackendGoesOn) {
  absl::StatusOr<void*> huge = gpu_->Allocate(size_t{1} << 52);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THAT(huge.status().message(), ::testing::HasSubstr("cuda:0"));
  EXPECT_TRUE(gpu_->Synchronize().ok());
  BackendBuffer<float> ok = ToBackend(gpu_.get(), std::vector<float>{1, 2, 3});
  EXPECT_EQ(ToHost(gpu_.get(), ok, 3), (std::vector<float>{1, 2, 3}));
}

TEST_F(CudaBackendTest, TwoBackendsShareOneDevice) {
  const std::vector<float> a = RandomVector(64 * 32, 3), b = RandomVector(32 * 16, 4);
  auto run = [&](Backend* backend) {
    BackendBuffer<float> da = ToBackend(backend, a), db = ToBackend(backend, b), c(backend);
    EXPECT_TRUE(c.Reserve(64 * 16).ok());
    backend->Gemm(false, false, 64, 16, 32, 1.0f, da.data(), db.data(), 0.0f, c.data());
    return ToHost(backend, c, 64 * 16);
  };
  absl::StatusOr<std::unique_ptr<Backend>> other = NewCudaBackend(CudaOptions());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(run(other->get()), run(gpu_.get()));
}

// ---- Kernels ------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, GemmMatchesCpuForEveryTranspositionAndShape) {
  struct Shape {
    int m, n, k;
  };
  for (const Shape s :
       {Shape{3, 4, 5}, Shape{64, 256, 784}, Shape{33, 17, 129}, Shape{1, 10, 128}, Shape{32, 784, 25}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 0.5f}) {
          const std::vector<float> a = RandomVector(s.m * s.k, 1), b = RandomVector(s.k * s.n, 2);
          std::vector<float> c0 = RandomVector(s.m * s.n, 3);
          if (beta == 0) c0[0] = NAN;  // beta == 0 overwrites garbage
          Compare(
              [&](Backend* backend) {
                BackendBuffer<float> da = ToBackend(backend, a), db = ToBackend(backend, b);
                BackendBuffer<float> dc = ToBackend(backend, c0);
                backend->Gemm(ta, tb, s.m, s.n, s.k, 2.0f, da.data(), db.data(), beta, dc.data());
                return ToHost(backend, dc, s.m * s.n);
              },
              kFp32Tolerance, kTf32Tolerance,
              "gemm " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                  " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta));
        }
      }
    }
  }
}

TEST_F(CudaBackendTest, GemmWithEmptyInnerDimensionScalesOrClears) {
  for (float beta : {0.0f, 2.0f}) {
    CompareExactly<float>(
        [&](Backend* b) {
          BackendBuffer<float> c = ToBackend(b, std::vector<float>{beta == 0 ? NAN : 1.0f, 3, 4, 5});
          b->Gemm(true, false, 2, 2, 0, 1.0f, nullptr, nullptr, beta, c.data());
          return ToHost(b, c, 4);
        },
        "k == 0, beta " + std::to_string(beta));
  }
}

TEST_F(CudaBackendTest, FillAddBiasAndColumnSumsMatchExactly) {
  const int rows = 300, cols = 77;
  const std::vector<float> x = RandomVector(rows * cols, 5), bias = RandomVector(cols, 6);
  CompareExactly<float>(
      [&](Backend* b) {
        BackendBuffer<float> dx = ToBackend(b, x), dbias = ToBackend(b, bias);
        b->AddBias(rows, cols, dbias.data(), dx.data());
        return ToHost(b, dx, rows * cols);
      },
      "AddBias");
  for (float beta : {0.0f, 0.75f}) {
    std::vector<float> out0 = RandomVector(cols, 7);
    if (beta == 0) out0[3] = NAN;
    CompareExactly<float>(
        [&](Backend* b) {
          BackendBuffer<float> dx = ToBackend(b, x), out = ToBackend(b, out0);
          b->ColumnSums(rows, cols, dx.data(), 0.25f, beta, out.data());
          return ToHost(b, out, cols);
        },
        "ColumnSums beta " + std::to_string(beta));
  }
  CompareExactly<float>(
      [&](Backend* b) {
        BackendBuffer<float> dx = ToBackend(b, x);
        b->Fill(rows * cols - 1, -2.5f, dx.data() + 1);  // leaves x[0]
        return ToHost(b, dx, rows * cols);
      },
      "Fill");
}

TEST_F(CudaBackendTest, PairwiseDotsMatchExactly) {
  // 26 fields of 16 floats at column 13 of rows 429 wide, as the CTR model's input with DeepFM.
  const int rows = 257, fields = 26, dim = 16, stride = 13 + fields * dim;
  const std::vector<float> x = RandomVector(rows * stride, 21), y0 = RandomVector(rows, 22),
                           dy = RandomVector(rows, 23), dx0 = RandomVector(rows * stride, 24);
  CompareExactly<float>(
      [&](Backend* b) {
        BackendBuffer<float> dx_in = ToBackend(b, x), y = ToBackend(b, y0), ddy = ToBackend(b, dy),
                             g = ToBackend(b, dx0);
        b->PairwiseDotsForward(rows, fields, dim, dx_in.data() + 13, stride, y.data());
        b->PairwiseDotsBackward(rows, fields, dim, dx_in.data() + 13, stride, ddy.data(), g.data() + 13, stride);
        std::vector<float> out = ToHost(b, y, rows);
        const std::vector<float> grads = ToHost(b, g, rows * stride);
        out.insert(out.end(), grads.begin(), grads.end());
        return out;
      },
      "pairwise dots");
}

TEST_F(CudaBackendTest, ReluMatchesExactlyAlsoInPlace) {
  const int64_t n = 100003;
  const std::vector<float> x = TiedValues(n, 8), dy = RandomVector(n, 9);
  CompareExactly<float>(
      [&](Backend* b) {
        BackendBuffer<float> dx = ToBackend(b, x), y(b), ddy = ToBackend(b, dy), g(b);
        EXPECT_TRUE(y.Reserve(n).ok() && g.Reserve(n).ok());
        b->ReluForward(n, dx.data(), y.data());
        b->ReluBackward(n, y.data(), ddy.data(), g.data());
        b->ReluForward(n, dx.data(), dx.data());                // in place
        b->ReluBackward(n, dx.data(), ddy.data(), ddy.data());  // in place
        std::vector<float> out = ToHost(b, y, n);
        for (const BackendBuffer<float>* buffer : {&g, &dx, &ddy}) {
          const std::vector<float> part = ToHost(b, *buffer, n);
          out.insert(out.end(), part.begin(), part.end());
        }
        return out;
      },
      "relu");
}

TEST_F(CudaBackendTest, SoftmaxCrossEntropyMatchesCpu) {
  struct Case {
    int rows, cols;
    bool ties;
  };
  for (const Case c :
       {Case{100, 10, false}, Case{64, 10, true}, Case{37, 70, true}, Case{1, 2, false}, Case{513, 3, true}}) {
    SCOPED_TRACE(testing::Message() << c.rows << "x" << c.cols << " ties " << c.ties);
    const std::vector<float> logits =
        c.ties ? TiedValues(c.rows * c.cols, 10) : RandomVector(c.rows * c.cols, 10, -5.0f, 5.0f);
    std::vector<int32_t> labels(c.rows);
    for (int r = 0; r < c.rows; ++r) labels[r] = (r * 7 + 3) % c.cols;
    const float scale = 1.0f / c.rows;
    for (int mode = 0; mode < 3; ++mode) {  // no gradient, separate gradient, in place
      XentResult want, got;
      std::vector<float> want_grad, got_grad;
      for (Backend* b : {cpu_.get(), gpu_.get()}) {
        BackendBuffer<float> z = ToBackend(b, logits), d(b);
        BackendBuffer<int32_t> l = ToBackend(b, labels);
        EXPECT_TRUE(d.Reserve(c.rows * c.cols).ok());
        float* dlogits = mode == 0 ? nullptr : mode == 1 ? d.data() : z.data();
        const XentResult r = b->SoftmaxCrossEntropy(c.rows, c.cols, z.data(), l.data(), scale, dlogits);
        std::vector<float> grad;
        if (mode > 0) grad = ToHost(b, mode == 1 ? d : z, c.rows * c.cols);
        (b == cpu_.get() ? want : got) = r;
        (b == cpu_.get() ? want_grad : got_grad) = grad;
      }
      EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-9 * std::fabs(want.loss_sum)) << "mode " << mode;
      EXPECT_EQ(got.correct, want.correct) << "mode " << mode;
      ExpectClose(got_grad, want_grad, 1e-6, "dlogits mode " + std::to_string(mode));
    }
  }
}

TEST_F(CudaBackendTest, Im2ColAndCol2ImMatchExactly) {
  const int n = 3;
  for (const Window2d& g : {MakeWindow(3, 7, 6, 3, 1, 1), MakeWindow(2, 9, 8, 3, 2, 1), MakeWindow(4, 5, 5, 2, 2, 0),
                            MakeWindow(1, 28, 28, 5, 1, 2), MakeWindow(2, 9, 9, 2, 4, 0), MakeWindow(2, 6, 5, 3, 3, 2),
                            MakeWindow(32, 14, 14, 5, 1, 2)}) {
    const int64_t x_size = n * g.image_elements(), col_size = n * g.col_rows() * g.col_cols();
    const std::vector<float> x = RandomVector(x_size, 11), col = RandomVector(col_size, 12);
    CompareExactly<float>(
        [&](Backend* b) {
          BackendBuffer<float> dx = ToBackend(b, x);
          BackendBuffer<float> dcol = ToBackend(b, std::vector<float>(col_size, 7.0f));
          b->Im2Col(n, g, dx.data(), dcol.data());
          return ToHost(b, dcol, col_size);
        },
        "Im2Col " + Describe(g));
    CompareExactly<float>(
        [&](Backend* b) {
          BackendBuffer<float> dx = ToBackend(b, x), dcol = ToBackend(b, col);  // accumulates
          b->Col2Im(n, g, dcol.data(), dx.data());
          return ToHost(b, dx, x_size);
        },
        "Col2Im " + Describe(g));
  }
}

TEST_F(CudaBackendTest, MaxPoolMatchesExactlyWithTiesAndOverlaps) {
  const int n = 3;
  for (const Window2d& g : {MakeWindow(2, 5, 5, 2, 2, 0), MakeWindow(3, 7, 6, 3, 2, 0), MakeWindow(2, 6, 6, 3, 1, 0),
                            MakeWindow(32, 28, 28, 2, 2, 0), MakeWindow(1, 9, 10, 2, 3, 0)}) {
    const int64_t x_size = n * g.image_elements();
    const int64_t y_size = static_cast<int64_t>(n) * g.channels * g.col_cols();
    const std::vector<float> x = TiedValues(x_size, 13), dy = RandomVector(y_size, 14);
    CompareExactly<int32_t>(
        [&](Backend* b) {
          BackendBuffer<float> dx = ToBackend(b, x), y(b);
          BackendBuffer<int32_t> argmax(b);
          EXPECT_TRUE(y.Reserve(y_size).ok() && argmax.Reserve(y_size).ok());
          b->MaxPoolForward(n, g, dx.data(), y.data(), argmax.data());
          std::vector<int32_t> out = ToHost(b, argmax, y_size);
          for (float v : ToHost(b, y, y_size)) out.push_back(static_cast<int32_t>(v));
          return out;
        },
        "MaxPoolForward " + Describe(g));
    CompareExactly<float>(
        [&](Backend* b) {
          BackendBuffer<float> dx = ToBackend(b, x), y(b), ddy = ToBackend(b, dy);
          BackendBuffer<int32_t> argmax(b);
          EXPECT_TRUE(y.Reserve(y_size).ok() && argmax.Reserve(y_size).ok());
          b->MaxPoolForward(n, g, dx.data(), y.data(), argmax.data());
          BackendBuffer<float> grad = ToBackend(b, RandomVector(x_size, 15));  // garbage
          b->MaxPoolBackward(n, g, argmax.data(), ddy.data(), grad.data());
          return ToHost(b, grad, x_size);
        },
        "MaxPoolBackward " + Describe(g));
  }
}

// ---- Layers -------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, LinearForwardAndBackwardMatchCpu) {
  const int n = 64, in = 784, out = 256;
  Linear layer(in, out);
  const std::vector<float> x = RandomVector(n * in, 16), w = RandomVector(in * out, 17, -0.1f, 0.1f);
  const std::vector<float> bias = RandomVector(out, 18), dy = RandomVector(n * out, 19);
  Compare(
      [&](Backend* b) {
        BackendBuffer<float> dx = ToBackend(b, x), dw = ToBackend(b, w), db = ToBackend(b, bias);
        BackendBuffer<float> y(b), ddy = ToBackend(b, dy);
        BackendBuffer<float> gw = ToBackend(b, RandomVector(in * out, 20));  // garbage
        BackendBuffer<float> gb = ToBackend(b, RandomVector(out, 21));
        BackendBuffer<float> gx = ToBackend(b, RandomVector(n * in, 22));
        EXPECT_TRUE(y.Reserve(n * out).ok());
        layer.Forward(b, n, dx.data(), dw.data(), db.data(), y.data());
        layer.Backward(b, n, dx.data(), dw.data(), ddy.data(), gw.data(), gb.data(), gx.data());
        std::vector<float> all = ToHost(b, y, n * out);
        for (const auto& [buffer, size] : {std::pair{&gw, in * out}, std::pair{&gb, out}, std::pair{&gx, n * in}}) {
          const std::vector<float> part = ToHost(b, *buffer, size);
          all.insert(all.end(), part.begin(), part.end());
        }
        return all;
      },
      kFp32Tolerance, kTf32Tolerance, "linear y, dw, db, dx");
}

TEST_F(CudaBackendTest, ReluAndSoftmaxLayersMatchCpu) {
  const int n = 50, classes = 10;
  Relu relu(classes);
  SoftmaxCrossEntropy loss(classes);
  const std::vector<float> z = RandomVector(n * classes, 23, -4.0f, 4.0f);
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = (i * 3 + 1) % classes;
  std::vector<double> losses;
  Compare(
      [&](Backend* b) {
        BackendBuffer<float> a = ToBackend(b, z), d(b);
        BackendBuffer<int32_t> l = ToBackend(b, labels);
        EXPECT_TRUE(d.Reserve(n * classes).ok());
        relu.Forward(b, n, a.data(), a.data());
        const XentResult r = loss.ForwardBackward(b, n, a.data(), l.data(), 1.0f / n, d.data());
        const XentResult f = loss.Forward(b, n, a.data(), l.data());
        EXPECT_EQ(r.correct, f.correct);
        EXPECT_NEAR(r.loss_sum, f.loss_sum, 1e-9 * r.loss_sum);
        losses.push_back(r.loss_sum);
        relu.Backward(b, n, a.data(), d.data(), d.data());
        return ToHost(b, d, n * classes);
      },
      1e-6, 1e-6, "relu + softmax-xent gradient");
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_NEAR(losses[1], losses[0], 1e-9 * losses[0]);
  EXPECT_NEAR(losses[2], losses[0], 1e-9 * losses[0]);
}

TEST_F(CudaBackendTest, Conv2dForwardAndBackwardMatchCpu) {
  const int n = 4;
  struct ConvCase {
    int in_c, out_c, kernel, stride, padding, height, width;
  };
  for (const ConvCase c :
       {ConvCase{1, 32, 5, 1, 2, 28, 28}, ConvCase{32, 64, 5, 1, 2, 14, 14}, ConvCase{3, 5, 3, 2, 1, 9, 8}}) {
    Conv2d conv(c.in_c, c.out_c, c.kernel, c.stride, c.padding, c.height, c.width);
    const int64_t x_size = n * conv.input_elements(), y_size = n * conv.output_elements();
    const std::vector<float> x = RandomVector(x_size, 24);
    const std::vector<float> w = RandomVector(conv.weight_elements(), 25, -0.2f, 0.2f);
    const std::vector<float> bias = RandomVector(conv.bias_elements(), 26);
    const std::vector<float> dy = RandomVector(y_size, 27);
    Compare(
        [&](Backend* b) {
          BackendBuffer<float> dx = ToBackend(b, x), dw = ToBackend(b, w), db = ToBackend(b, bias);
          BackendBuffer<float> y(b), ws(b), ddy = ToBackend(b, dy);
          BackendBuffer<float> gw = ToBackend(b, RandomVector(w.size(), 28));  // garbage
          BackendBuffer<float> gb = ToBackend(b, RandomVector(bias.size(), 29));
          BackendBuffer<float> gx = ToBackend(b, RandomVector(x_size, 30));
          EXPECT_TRUE(y.Reserve(y_size).ok() && ws.Reserve(conv.workspace_elements()).ok());
          conv.Forward(b, n, dx.data(), dw.data(), db.data(), y.data(), ws.data());
          conv.Backward(b, n, dx.data(), dw.data(), ddy.data(), gw.data(), gb.data(), gx.data(), ws.data());
          std::vector<float> all = ToHost(b, y, y_size);
          for (const auto& [buffer, size] :
               {std::pair{&gw, static_cast<int64_t>(w.size())}, std::pair{&gb, static_cast<int64_t>(bias.size())},
                std::pair{&gx, x_size}}) {
            const std::vector<float> part = ToHost(b, *buffer, size);
            all.insert(all.end(), part.begin(), part.end());
          }
          return all;
        },
        kFp32Tolerance, kTf32Tolerance,
        "conv " + std::to_string(c.in_c) + "->" + std::to_string(c.out_c) + " y, dw, db, dx");
  }
}

TEST_F(CudaBackendTest, MaxPool2dForwardAndBackwardMatchExactly) {
  const int n = 4;
  for (const int kernel : {2, 3}) {
    MaxPool2d pool(32, 28, 27, kernel, 2);
    const int64_t x_size = n * pool.input_elements(), y_size = n * pool.output_elements();
    const std::vector<float> x = DistinctValues(x_size, 33), dy = RandomVector(y_size, 34);
    CompareExactly<float>(
        [&](Backend* b) {
          BackendBuffer<float> dx = ToBackend(b, x), y(b), ddy = ToBackend(b, dy);
          BackendBuffer<int32_t> argmax(b);
          EXPECT_TRUE(y.Reserve(y_size).ok() && argmax.Reserve(y_size).ok());
          BackendBuffer<float> grad = ToBackend(b, RandomVector(x_size, 35));  // garbage
          pool.Forward(b, n, dx.data(), y.data(), argmax.data());
          pool.Backward(b, n, argmax.data(), ddy.data(), grad.data());
          std::vector<float> all = ToHost(b, y, y_size);
          for (int32_t a : ToHost(b, argmax, y_size)) all.push_back(static_cast<float>(a));
          const std::vector<float> g = ToHost(b, grad, x_size);
          all.insert(all.end(), g.begin(), g.end());
          return all;
        },
        "max_pool2d kernel " + std::to_string(kernel));
  }
}

// ---- Models -------------------------------------------------------------------------------------

// Mean gradient, loss sum and correct count of one ComputeGradient on `backend`.
struct GradientRun {
  std::vector<float> grad;
  BatchStats stats;
};

template <typename MakeModel>
GradientRun RunGradient(Backend* backend, const MakeModel& make, const std::vector<float>& x,
                        const std::vector<int32_t>& labels, int n) {
  std::unique_ptr<Model> model = make(backend);
  GradientRun run;
  EXPECT_TRUE(model->InitializeParameters(5).ok());
  run.grad.assign(model->num_parameters(), NAN);
  EXPECT_TRUE(model->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(run.grad), &run.stats).ok());
  return run;
}

// How close a whole model's gradient must be. A ReLU input or a pooling window within rounding of
// a kink can route one position's gradient differently on the two devices: a legitimate
// difference, large in the few elements it touches (a row of a conv weight gradient) but small
// in the norm. With TF32 such kinks are common (activations differ by ~1e-3), so only the norm
// is checked. An indexing error is O(1) in both.
struct GradientTolerance {
  double element;   // |got - want| <= element * max|want| ...
  double fraction;  // ... for at least this fraction of each tensor's elements
  double l2;        // and ||got - want|| / ||want|| <= l2 per tensor
  double loss;      // relative, for the loss sum
};
constexpr GradientTolerance kFp32Gradient = {1e-4, 0.95, 0.1, 1e-5};
constexpr GradientTolerance kTf32Gradient = {1.0, 0.0, 0.25, 1e-2};

void ExpectSameGradient(const Model& model, const GradientRun& got, const GradientRun& want,
                        const GradientTolerance& tolerance, const std::string& what) {
  EXPECT_NEAR(got.stats.loss_sum, want.stats.loss_sum, tolerance.loss * want.stats.loss_sum) << what;
  EXPECT_EQ(got.stats.samples, want.stats.samples) << what;
  for (const ParamSpec& p : model.params()) {
    double diff = 0, norm = 0, max_abs = 0;
    for (int64_t i = p.flat_offset; i < p.flat_offset + p.num_elements; ++i) {
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(want.grad[i])));
    }
    int64_t close = 0;
    for (int64_t i = p.flat_offset; i < p.flat_offset + p.num_elements; ++i) {
      const double d = static_cast<double>(got.grad[i]) - want.grad[i];
      diff += d * d;
      norm += static_cast<double>(want.grad[i]) * want.grad[i];
      if (std::fabs(d) <= tolerance.element * max_abs) ++close;
    }
    ASSERT_GT(norm, 0) << what << " " << p.name << ": the CPU gradient is all zeros";
    EXPECT_LE(std::sqrt(diff / norm), tolerance.l2) << what << " " << p.name;  // NaN fails too
    EXPECT_GE(close, tolerance.fraction * p.num_elements) << what << " " << p.name;
  }
}

TEST_F(CudaBackendTest, MlpAndCnnGradientsMatchCpu) {
  struct Case {
    std::string name;
    std::function<std::unique_ptr<Model>(Backend*)> make;
    int n;
  };
  CnnShape odd;  // odd image sizes and few channels
  odd.input_height = 11;
  odd.input_width = 9;
  odd.conv1_channels = 3;
  odd.conv2_channels = 4;
  odd.hidden = 7;
  odd.classes = 3;
  const std::vector<Case> cases = {
      {"mlp",
       [](Backend* b) -> std::unique_ptr<Model> {
         return *Mlp::Create({784, 256, 128, 10}, b);
       },
       64},
      {"cnn", [](Backend* b) -> std::unique_ptr<Model> { return *Cnn::Create(CnnShape(), b); }, 4},
      {"cnn odd", [odd](Backend* b) -> std::unique_ptr<Model> { return *Cnn::Create(odd, b); }, 5},
  };
  for (const Case& c : cases) {
    std::unique_ptr<Model> shape_of = c.make(cpu_.get());
    const std::vector<float> x = RandomVector(static_cast<int64_t>(c.n) * shape_of->input_size(), 31, 0.0f, 1.0f);
    std::vector<int32_t> labels(c.n);
    for (int i = 0; i < c.n; ++i) labels[i] = (i * 7 + 3) % shape_of->num_classes();
    const GradientRun want = RunGradient(cpu_.get(), c.make, x, labels, c.n);
    const GradientRun fp32 = RunGradient(gpu_.get(), c.make, x, labels, c.n);
    const GradientRun tf32 = RunGradient(gpu_tf32_.get(), c.make, x, labels, c.n);
    EXPECT_EQ(fp32.stats.correct, want.stats.correct) << c.name;
    ExpectSameGradient(*shape_of, fp32, want, kFp32Gradient, c.name + " fp32");
    ExpectSameGradient(*shape_of, tf32, want, kTf32Gradient, c.name + " tf32");
  }
}

// 30 SGD steps of the CNN on a small separable problem (a bright patch whose position is the
// class), from the same initial weights: the GPU's loss curve follows the CPU's.
TEST_F(CudaBackendTest, TrainingLossCurveMatchesCpu) {
  const int n = 48, side = 12, steps = 30;
  CnnShape shape;
  shape.input_height = side;
  shape.input_width = side;
  shape.conv1_channels = 4;
  shape.conv2_channels = 8;
  shape.hidden = 16;
  shape.classes = 3;
  std::vector<float> x = RandomVector(n * side * side, 32, 0.0f, 0.3f);
  std::vector<int32_t> labels(n);
  const int corner[3][2] = {{0, 0}, {0, 8}, {8, 4}};
  for (int i = 0; i < n; ++i) {
    labels[i] = (i * 7 + 3) % 3;
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 4; ++c) {
        x[(i * side + corner[labels[i]][0] + r) * side + corner[labels[i]][1] + c] += 1.0f;
      }
    }
  }
  auto curve = [&](Backend* backend) {
    std::unique_ptr<Model> cnn = *Cnn::Create(shape, backend);
    EXPECT_TRUE(cnn->InitializeParameters(3).ok());
    std::vector<float> flat(cnn->num_parameters()), grad(cnn->num_parameters());
    EXPECT_TRUE(cnn->GetParameters(absl::MakeSpan(flat)).ok());
    std::vector<float> losses;
    for (int step = 0; step < steps; ++step) {
      BatchStats stats;
      EXPECT_TRUE(cnn->ComputeGradient(x.data(), labels.data(), n, absl::MakeSpan(grad), &stats).ok());
      losses.push_back(static_cast<float>(stats.loss_sum / n));
      for (size_t i = 0; i < flat.size(); ++i) flat[i] -= 0.1f * grad[i];
      EXPECT_TRUE(cnn->SetParameters(flat).ok());
    }
    return losses;
  };
  const std::vector<float> want = curve(cpu_.get());
  EXPECT_LT(want.back(), 0.5f * want.front()) << "the CPU run did not learn: a weak comparison";
  // Without kinks the curves agree to ~1e-6; the margin covers a kink crossed in one step.
  ExpectClose(curve(gpu_.get()), want, 1e-3, "fp32 loss curve");
  ExpectClose(curve(gpu_tf32_.get()), want, 5e-2, "tf32 loss curve");
}

}  // namespace
}  // namespace model
}  // namespace pstrain
