// The CPU backend's convolution and pooling kernels against naive loops, and Conv2d / MaxPool2d
// against a direct convolution and central finite differences. Tensors are tiny on purpose.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend.h"
#include "model/conv2d.h"
#include "model/cpu_backend.h"
#include "model/linear.h"
#include "model/max_pool2d.h"
#include "model/relu.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using testutil::DistinctValues;
using testutil::Dot;
using testutil::ExpectMatchesFiniteDifferences;
using testutil::MakeWindow;
using testutil::RandomVector;
using testutil::ToBackend;
using testutil::ToHost;

// x[i][c][h][w] of an NCHW batch, or 0 outside the image (zero padding).
float Pixel(const std::vector<float>& x, const Window2d& g, int i, int c, int h, int w) {
  if (h < 0 || h >= g.height || w < 0 || w >= g.width) return 0.0f;
  return x[((static_cast<int64_t>(i) * g.channels + c) * g.height + h) * g.width + w];
}

// The direct definition of a convolution, with no im2col.
std::vector<float> NaiveConv(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                             int n, int out_c, const Window2d& g) {
  const int oh_n = g.out_height(), ow_n = g.out_width(), k = g.kernel;
  std::vector<float> y;
  for (int i = 0; i < n; ++i) {
    for (int o = 0; o < out_c; ++o) {
      for (int oh = 0; oh < oh_n; ++oh) {
        for (int ow = 0; ow < ow_n; ++ow) {
          double sum = b[o];
          for (int c = 0; c < g.channels; ++c) {
            for (int kh = 0; kh < k; ++kh) {
              for (int kw = 0; kw < k; ++kw) {
                sum += w[((o * g.channels + c) * k + kh) * k + kw] *
                       Pixel(x, g, i, c, oh * g.stride - g.padding + kh, ow * g.stride - g.padding + kw);
              }
            }
          }
          y.push_back(static_cast<float>(sum));
        }
      }
    }
  }
  return y;
}

class ConvTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = NewCpuBackend();
};

TEST_F(ConvTest, Im2ColMatchesNaiveLoops) {
  const int n = 2;
  for (const Window2d& g : {MakeWindow(2, 5, 4, 3, 1, 0), MakeWindow(2, 5, 4, 3, 2, 1)}) {
    const std::vector<float> x = RandomVector(n * g.image_elements(), 1);
    const int64_t per_image = g.col_rows() * g.col_cols();
    BackendBuffer<float> bx = ToBackend(backend_.get(), x);
    BackendBuffer<float> col = ToBackend(backend_.get(), std::vector<float>(n * per_image, 7.0f));
    backend_->Im2Col(n, g, bx.data(), col.data());
    const std::vector<float> got = ToHost(backend_.get(), col, n * per_image);
    const int k = g.kernel;
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < g.channels; ++c) {
        for (int kh = 0; kh < k; ++kh) {
          for (int kw = 0; kw < k; ++kw) {
            for (int oh = 0; oh < g.out_height(); ++oh) {
              for (int ow = 0; ow < g.out_width(); ++ow) {
                const int64_t row = (c * k + kh) * k + kw;
                const int64_t index = i * per_image + row * g.col_cols() + oh * g.out_width() + ow;
                EXPECT_EQ(got[index], Pixel(x, g, i, c, oh * g.stride - g.padding + kh, ow * g.stride - g.padding + kw))
                    << "stride " << g.stride << " image " << i << " row " << row << " pixel " << oh << "," << ow;
              }
            }
          }
        }
      }
    }
  }
}

TEST_F(ConvTest, Col2ImIsTheAccumulatingAdjointOfIm2Col) {
  const int n = 2;
  for (const Window2d& g : {MakeWindow(3, 4, 5, 2, 1, 1), MakeWindow(2, 6, 5, 3, 2, 1)}) {
    const int64_t x_size = n * g.image_elements();
    const int64_t col_size = n * g.col_rows() * g.col_cols();
    const std::vector<float> x = RandomVector(x_size, 2), c = RandomVector(col_size, 3);
    BackendBuffer<float> bx = ToBackend(backend_.get(), x);
    BackendBuffer<float> bcol(backend_.get());
    ASSERT_TRUE(bcol.Reserve(col_size).ok());
    backend_->Im2Col(n, g, bx.data(), bcol.data());
    const double lhs = Dot(ToHost(backend_.get(), bcol, col_size), c);  // <Im2Col(x), c>

    // Col2Im onto a non-zero x0 must give x0 + Col2Im(c): check <x0 + Col2Im(c), x> - <x0, x>.
    const std::vector<float> x0 = RandomVector(x_size, 4);
    BackendBuffer<float> bc = ToBackend(backend_.get(), c), acc = ToBackend(backend_.get(), x0);
    backend_->Col2Im(n, g, bc.data(), acc.data());
    const double rhs = Dot(ToHost(backend_.get(), acc, x_size), x) - Dot(x0, x);
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::fabs(lhs))) << "stride " << g.stride;
  }
}

TEST_F(ConvTest, Conv2dForwardMatchesDirectConvolution) {
  const int n = 2, in_c = 2, out_c = 3, height = 5, width = 6, kernel = 3;
  for (int stride : {1, 2}) {
    for (int padding : {0, 1}) {
      Conv2d conv(in_c, out_c, kernel, stride, padding, height, width);
      const std::vector<float> x = RandomVector(n * conv.input_elements(), 5);
      const std::vector<float> w = RandomVector(conv.weight_elements(), 6);
      const std::vector<float> b = RandomVector(conv.bias_elements(), 7);
      BackendBuffer<float> bx = ToBackend(backend_.get(), x), bw = ToBackend(backend_.get(), w);
      BackendBuffer<float> bb = ToBackend(backend_.get(), b);
      BackendBuffer<float> y(backend_.get()), ws(backend_.get());
      ASSERT_TRUE(y.Reserve(n * conv.output_elements()).ok());
      ASSERT_TRUE(ws.Reserve(conv.workspace_elements()).ok());
      conv.Forward(backend_.get(), n, bx.data(), bw.data(), bb.data(), y.data(), ws.data());

      const std::vector<float> expected = NaiveConv(x, w, b, n, out_c, conv.window());
      ASSERT_EQ(expected.size(), static_cast<size_t>(n * conv.output_elements()));
      EXPECT_EQ(conv.out_height(), (height + 2 * padding - kernel) / stride + 1);
      const std::vector<float> got = ToHost(backend_.get(), y, expected.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], expected[i], 1e-5) << "stride " << stride << " padding " << padding << " element " << i;
      }
    }
  }
}

TEST_F(ConvTest, Conv2dBackwardMatchesFiniteDifferences) {
  const int n = 2, in_c = 2, out_c = 3, height = 5, width = 4, kernel = 3;
  for (int stride : {1, 2}) {
    for (int padding : {0, 1}) {
      Conv2d conv(in_c, out_c, kernel, stride, padding, height, width);
      const int64_t y_size = n * conv.output_elements();
      std::vector<float> x = RandomVector(n * conv.input_elements(), 11);
      std::vector<float> w = RandomVector(conv.weight_elements(), 12);
      std::vector<float> b = RandomVector(conv.bias_elements(), 13);
      const std::vector<float> r = RandomVector(y_size, 14);  // L = <y, r>, so dL/dy = r
      BackendBuffer<float> ws(backend_.get());
      ASSERT_TRUE(ws.Reserve(conv.workspace_elements()).ok());

      auto loss = [&]() {
        BackendBuffer<float> bx = ToBackend(backend_.get(), x), bw = ToBackend(backend_.get(), w);
        BackendBuffer<float> bb = ToBackend(backend_.get(), b);
        BackendBuffer<float> y(backend_.get());
        EXPECT_TRUE(y.Reserve(y_size).ok());
        conv.Forward(backend_.get(), n, bx.data(), bw.data(), bb.data(), y.data(), ws.data());
        return Dot(ToHost(backend_.get(), y, y_size), r);
      };

      BackendBuffer<float> bx = ToBackend(backend_.get(), x), bw = ToBackend(backend_.get(), w);
      BackendBuffer<float> bdy = ToBackend(backend_.get(), r);
      // Gradient buffers start as garbage: Backward must overwrite, not accumulate.
      BackendBuffer<float> gw = ToBackend(backend_.get(), RandomVector(w.size(), 15));
      BackendBuffer<float> gb = ToBackend(backend_.get(), RandomVector(b.size(), 16));
      BackendBuffer<float> gx = ToBackend(backend_.get(), RandomVector(x.size(), 17));
      conv.Backward(backend_.get(), n, bx.data(), bw.data(), bdy.data(), gw.data(), gb.data(), gx.data(), ws.data());

      SCOPED_TRACE(testing::Message() << "stride " << stride << " padding " << padding);
      ExpectMatchesFiniteDifferences("conv dW", &w, loss, ToHost(backend_.get(), gw, w.size()));
      ExpectMatchesFiniteDifferences("conv db", &b, loss, ToHost(backend_.get(), gb, b.size()));
      ExpectMatchesFiniteDifferences("conv dx", &x, loss, ToHost(backend_.get(), gx, x.size()));
    }
  }
}

TEST_F(ConvTest, Conv2dBackwardWithNoImagesGivesZeroGradients) {
  Conv2d conv(1, 2, 2, 1, 0, 3, 3);
  BackendBuffer<float> w = ToBackend(backend_.get(), RandomVector(conv.weight_elements(), 1));
  BackendBuffer<float> gw = ToBackend(backend_.get(), std::vector<float>(8, 7.0f));
  BackendBuffer<float> gb = ToBackend(backend_.get(), std::vector<float>{7, 7});
  BackendBuffer<float> ws(backend_.get());
  ASSERT_TRUE(ws.Reserve(conv.workspace_elements()).ok());
  conv.Backward(backend_.get(), 0, nullptr, w.data(), nullptr, gw.data(), gb.data(), nullptr, ws.data());
  EXPECT_EQ(ToHost(backend_.get(), gw, 8), std::vector<float>(8, 0.0f));
  EXPECT_EQ(ToHost(backend_.get(), gb, 2), (std::vector<float>{0, 0}));
}

TEST_F(ConvTest, InvalidShapesAreRejectedWithTheReason) {
  EXPECT_TRUE(Conv2d::Validate(1, 32, 5, 1, 2, 28, 28).ok());
  const absl::Status padding = Conv2d::Validate(1, 32, 3, 1, 3, 28, 28);
  EXPECT_EQ(padding.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(padding.message().find("expected padding in [0, 2]"), absl::string_view::npos) << padding;
  const absl::Status kernel = Conv2d::Validate(1, 4, 5, 1, 0, 3, 8);
  EXPECT_NE(kernel.message().find("kernel larger than the padded input 3x8"), absl::string_view::npos) << kernel;
  EXPECT_EQ(Conv2d::Validate(1, 0, 3, 1, 0, 8, 8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Conv2d::Validate(1, 4, 3, 0, 0, 8, 8).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_TRUE(MaxPool2d::Validate(32, 28, 28, 2, 2).ok());
  const absl::Status pool = MaxPool2d::Validate(3, 4, 1, 2, 2);
  EXPECT_EQ(pool.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pool.message().find("max_pool2d (channels 3, input 4x1, kernel 2, stride 2)"), absl::string_view::npos)
      << pool;
  EXPECT_EQ(MaxPool2d::Validate(3, 4, 4, 2, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConvTest, MaxPoolForwardMatchesNaiveLoop) {
  const int n = 2, channels = 2;
  // 2x2 stride 2 on 5x5 drops the last row and column; 3x3 stride 2 overlaps.
  for (const int kernel : {2, 3}) {
    MaxPool2d pool(channels, 5, 5, kernel, 2);
    const Window2d& g = pool.window();
    const std::vector<float> x = DistinctValues(n * pool.input_elements(), 1);
    BackendBuffer<float> bx = ToBackend(backend_.get(), x), y(backend_.get());
    BackendBuffer<int32_t> argmax(backend_.get());
    ASSERT_TRUE(y.Reserve(n * pool.output_elements()).ok());
    ASSERT_TRUE(argmax.Reserve(n * pool.output_elements()).ok());
    pool.Forward(backend_.get(), n, bx.data(), y.data(), argmax.data());
    const std::vector<float> got = ToHost(backend_.get(), y, n * pool.output_elements());
    const std::vector<int32_t> got_arg = ToHost(backend_.get(), argmax, n * pool.output_elements());
    EXPECT_EQ(pool.out_height(), 2);  // (5 - 2) / 2 + 1 and (5 - 3) / 2 + 1
    int64_t out = 0;
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < channels; ++c) {
        for (int oh = 0; oh < pool.out_height(); ++oh) {
          for (int ow = 0; ow < pool.out_width(); ++ow, ++out) {
            float best = -1e30f;
            int best_at = -1;
            for (int kh = 0; kh < kernel; ++kh) {
              for (int kw = 0; kw < kernel; ++kw) {
                const int h = oh * 2 + kh, w = ow * 2 + kw;
                if (Pixel(x, g, i, c, h, w) > best) {
                  best = Pixel(x, g, i, c, h, w);
                  best_at = h * g.width + w;
                }
              }
            }
            EXPECT_EQ(got[out], best) << "kernel " << kernel << " output " << out;
            EXPECT_EQ(got_arg[out], best_at) << "kernel " << kernel << " output " << out;
          }
        }
      }
    }
  }
}

TEST_F(ConvTest, MaxPoolTiesGoToTheFirstInWindowOrder) {
  MaxPool2d pool(1, 2, 2, 2, 2);
  BackendBuffer<float> x = ToBackend(backend_.get(), std::vector<float>{1, 3, 3, 3});
  BackendBuffer<float> y(backend_.get());
  BackendBuffer<int32_t> argmax(backend_.get());
  ASSERT_TRUE(y.Reserve(1).ok() && argmax.Reserve(1).ok());
  pool.Forward(backend_.get(), 1, x.data(), y.data(), argmax.data());
  EXPECT_EQ(ToHost(backend_.get(), y, 1)[0], 3.0f);
  EXPECT_EQ(ToHost(backend_.get(), argmax, 1)[0], 1);
}

TEST_F(ConvTest, MaxPoolBackwardMatchesFiniteDifferences) {
  const int n = 2, channels = 2;
  for (const int kernel : {2, 3}) {  // stride 2: disjoint windows, then overlapping ones
    MaxPool2d pool(channels, 5, 6, kernel, 2);
    const int64_t y_size = n * pool.output_elements();
    std::vector<float> x = DistinctValues(n * pool.input_elements(), 2);
    const std::vector<float> r = RandomVector(y_size, 3);
    auto loss = [&]() {
      BackendBuffer<float> bx = ToBackend(backend_.get(), x), y(backend_.get());
      BackendBuffer<int32_t> argmax(backend_.get());
      EXPECT_TRUE(y.Reserve(y_size).ok() && argmax.Reserve(y_size).ok());
      pool.Forward(backend_.get(), n, bx.data(), y.data(), argmax.data());
      return Dot(ToHost(backend_.get(), y, y_size), r);
    };
    BackendBuffer<float> bx = ToBackend(backend_.get(), x), y(backend_.get());
    BackendBuffer<int32_t> argmax(backend_.get());
    ASSERT_TRUE(y.Reserve(y_size).ok() && argmax.Reserve(y_size).ok());
    pool.Forward(backend_.get(), n, bx.data(), y.data(), argmax.data());
    BackendBuffer<float> dy = ToBackend(backend_.get(), r);
    BackendBuffer<float> dx = ToBackend(backend_.get(), RandomVector(x.size(), 4));  // garbage
    pool.Backward(backend_.get(), n, argmax.data(), dy.data(), dx.data());
    SCOPED_TRACE(testing::Message() << "kernel " << kernel);
    ExpectMatchesFiniteDifferences("pool dx", &x, loss, ToHost(backend_.get(), dx, x.size()));
  }
}

// conv -> relu -> pool -> flatten (no-op) -> linear, gradient w.r.t. the input: checks that the
// layers compose on plain NCHW buffers and that flatten really is a reinterpretation.
TEST_F(ConvTest, ConvReluPoolLinearChainMatchesFiniteDifferences) {
  const int n = 2, classes = 3;
  Conv2d conv(1, 2, 3, 1, 1, 4, 4);  // -> {2, 4, 4}
  Relu relu(static_cast<int>(conv.output_elements()));
  MaxPool2d pool(2, 4, 4, 2, 2);  // -> {2, 2, 2}
  Linear fc(static_cast<int>(pool.output_elements()), classes);
  std::vector<float> x = RandomVector(n * conv.input_elements(), 41);
  BackendBuffer<float> cw = ToBackend(backend_.get(), RandomVector(conv.weight_elements(), 42));
  BackendBuffer<float> cb = ToBackend(backend_.get(), RandomVector(conv.bias_elements(), 43));
  BackendBuffer<float> fw = ToBackend(backend_.get(), RandomVector(fc.weight_elements(), 44));
  BackendBuffer<float> fb = ToBackend(backend_.get(), RandomVector(fc.bias_elements(), 45));
  const std::vector<float> r = RandomVector(n * classes, 46);
  BackendBuffer<float> ws(backend_.get()), a1(backend_.get()), a2(backend_.get());
  BackendBuffer<float> logits(backend_.get());
  BackendBuffer<int32_t> argmax(backend_.get());
  ASSERT_TRUE(ws.Reserve(conv.workspace_elements()).ok());
  ASSERT_TRUE(a1.Reserve(n * conv.output_elements()).ok());
  ASSERT_TRUE(a2.Reserve(n * pool.output_elements()).ok());
  ASSERT_TRUE(argmax.Reserve(n * pool.output_elements()).ok());
  ASSERT_TRUE(logits.Reserve(n * classes).ok());

  auto forward = [&](const BackendBuffer<float>& bx) {
    conv.Forward(backend_.get(), n, bx.data(), cw.data(), cb.data(), a1.data(), ws.data());
    relu.Forward(backend_.get(), n, a1.data(), a1.data());
    pool.Forward(backend_.get(), n, a1.data(), a2.data(), argmax.data());
    fc.Forward(backend_.get(), n, a2.data(), fw.data(), fb.data(), logits.data());
  };
  auto loss = [&]() {
    BackendBuffer<float> bx = ToBackend(backend_.get(), x);
    forward(bx);
    return Dot(ToHost(backend_.get(), logits, n * classes), r);
  };

  BackendBuffer<float> bx = ToBackend(backend_.get(), x);
  forward(bx);
  BackendBuffer<float> dlogits = ToBackend(backend_.get(), r);
  BackendBuffer<float> d2(backend_.get()), d1(backend_.get()), dx(backend_.get());
  BackendBuffer<float> gfw(backend_.get()), gfb(backend_.get()), gcw(backend_.get());
  BackendBuffer<float> gcb(backend_.get());
  ASSERT_TRUE(d2.Reserve(n * pool.output_elements()).ok());
  ASSERT_TRUE(d1.Reserve(n * conv.output_elements()).ok());
  ASSERT_TRUE(dx.Reserve(x.size()).ok());
  ASSERT_TRUE(gfw.Reserve(fc.weight_elements()).ok() && gfb.Reserve(fc.bias_elements()).ok());
  ASSERT_TRUE(gcw.Reserve(conv.weight_elements()).ok() && gcb.Reserve(conv.bias_elements()).ok());
  fc.Backward(backend_.get(), n, a2.data(), fw.data(), dlogits.data(), gfw.data(), gfb.data(), d2.data());
  pool.Backward(backend_.get(), n, argmax.data(), d2.data(), d1.data());
  relu.Backward(backend_.get(), n, a1.data(), d1.data(), d1.data());
  conv.Backward(backend_.get(), n, bx.data(), cw.data(), d1.data(), gcw.data(), gcb.data(), dx.data(), ws.data());
  ExpectMatchesFiniteDifferences("chain dx", &x, loss, ToHost(backend_.get(), dx, x.size()));
}

}  // namespace
}  // namespace model
}  // namespace pstrain
