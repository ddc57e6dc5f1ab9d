// The CPU backend's kernels against naive loops, and each layer's backward pass against central
// finite differences of its forward pass.
#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend.h"
#include "model/cpu_backend.h"
#include "model/linear.h"
#include "model/relu.h"
#include "model/softmax_xent.h"
#include "model/test_util.h"

namespace pstrain {
namespace model {
namespace {

using testutil::Dot;
using testutil::ExpectMatchesFiniteDifferences;
using testutil::RandomVector;
using testutil::ToBackend;
using testutil::ToHost;

class LayersTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = NewCpuBackend();
};

TEST_F(LayersTest, GemmMatchesNaiveProductForEveryTransposition) {
  const int m = 3, n = 4, k = 5;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<float> a = RandomVector(m * k, 1), b = RandomVector(k * n, 2);
      const std::vector<float> c0 = RandomVector(m * n, 3);
      auto a_at = [&](int i, int p) { return ta ? a[p * m + i] : a[i * k + p]; };
      auto b_at = [&](int p, int j) { return tb ? b[j * k + p] : b[p * n + j]; };
      BackendBuffer<float> da = ToBackend(backend_.get(), a), db = ToBackend(backend_.get(), b);
      BackendBuffer<float> dc = ToBackend(backend_.get(), c0);
      backend_->Gemm(ta, tb, m, n, k, 2.0f, da.data(), db.data(), 0.5f, dc.data());
      const std::vector<float> c = ToHost(backend_.get(), dc, m * n);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double expected = 0.5 * c0[i * n + j];
          for (int p = 0; p < k; ++p) expected += 2.0 * a_at(i, p) * b_at(p, j);
          EXPECT_NEAR(c[i * n + j], expected, 1e-5) << "ta=" << ta << " tb=" << tb;
        }
      }
    }
  }
}

TEST_F(LayersTest, GemmWithEmptyInnerDimensionClearsOutput) {
  BackendBuffer<float> c = ToBackend(backend_.get(), std::vector<float>{NAN, 3.0f, 4.0f, 5.0f});
  backend_->Gemm(true, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.0f, c.data());
  EXPECT_EQ(ToHost(backend_.get(), c, 4), (std::vector<float>{0, 0, 0, 0}));
}

TEST_F(LayersTest, AddBiasAndColumnSums) {
  BackendBuffer<float> x = ToBackend(backend_.get(), std::vector<float>{1, 2, 3, 4, 5, 6});
  BackendBuffer<float> bias = ToBackend(backend_.get(), std::vector<float>{10, 20, 30});
  backend_->AddBias(2, 3, bias.data(), x.data());
  EXPECT_EQ(ToHost(backend_.get(), x, 6), (std::vector<float>{11, 22, 33, 14, 25, 36}));

  BackendBuffer<float> out = ToBackend(backend_.get(), std::vector<float>{1, 1, 1});
  backend_->ColumnSums(2, 3, x.data(), 0.5f, 2.0f, out.data());
  EXPECT_EQ(ToHost(backend_.get(), out, 3), (std::vector<float>{14.5f, 25.5f, 36.5f}));
}

TEST_F(LayersTest, LinearForwardComputesXWPlusB) {
  Linear layer(2, 3);
  BackendBuffer<float> x = ToBackend(backend_.get(), std::vector<float>{1, 2, -1, 0});
  BackendBuffer<float> w = ToBackend(backend_.get(), std::vector<float>{1, 2, 3, 4, 5, 6});
  BackendBuffer<float> b = ToBackend(backend_.get(), std::vector<float>{0.5f, 0, -1});
  BackendBuffer<float> y(backend_.get());
  ASSERT_TRUE(y.Reserve(6).ok());
  layer.Forward(backend_.get(), 2, x.data(), w.data(), b.data(), y.data());
  // Row 0: [1 2] W = [9 12 15]; row 1: [-1 0] W = [-1 -2 -3]; plus b.
  EXPECT_EQ(ToHost(backend_.get(), y, 6), (std::vector<float>{9.5f, 12, 14, -0.5f, -2, -4}));
}

TEST_F(LayersTest, LinearBackwardMatchesFiniteDifferences) {
  const int n = 5, in = 4, out = 3;
  Linear layer(in, out);
  std::vector<float> x = RandomVector(n * in, 11), w = RandomVector(in * out, 12);
  std::vector<float> b = RandomVector(out, 13);
  const std::vector<float> r = RandomVector(n * out, 14);  // L = sum(y .* r), so dL/dy = r

  auto loss = [&]() {
    BackendBuffer<float> dx = ToBackend(backend_.get(), x), dw = ToBackend(backend_.get(), w);
    BackendBuffer<float> dbias = ToBackend(backend_.get(), b);
    BackendBuffer<float> y(backend_.get());
    EXPECT_TRUE(y.Reserve(n * out).ok());
    layer.Forward(backend_.get(), n, dx.data(), dw.data(), dbias.data(), y.data());
    return Dot(ToHost(backend_.get(), y, n * out), r);
  };

  BackendBuffer<float> bx = ToBackend(backend_.get(), x), bw = ToBackend(backend_.get(), w);
  BackendBuffer<float> bdy = ToBackend(backend_.get(), r);
  BackendBuffer<float> gw(backend_.get()), gb(backend_.get()), gx(backend_.get());
  ASSERT_TRUE(gw.Reserve(in * out).ok() && gb.Reserve(out).ok() && gx.Reserve(n * in).ok());
  layer.Backward(backend_.get(), n, bx.data(), bw.data(), bdy.data(), gw.data(), gb.data(), gx.data());

  ExpectMatchesFiniteDifferences("dW", &w, loss, ToHost(backend_.get(), gw, in * out));
  ExpectMatchesFiniteDifferences("db", &b, loss, ToHost(backend_.get(), gb, out));
  ExpectMatchesFiniteDifferences("dx", &x, loss, ToHost(backend_.get(), gx, n * in));
}

TEST_F(LayersTest, LinearBackwardWithNoRowsGivesZeroGradients) {
  Linear layer(2, 2);
  BackendBuffer<float> w = ToBackend(backend_.get(), std::vector<float>{1, 2, 3, 4});
  BackendBuffer<float> gw = ToBackend(backend_.get(), std::vector<float>{7, 7, 7, 7});
  BackendBuffer<float> gb = ToBackend(backend_.get(), std::vector<float>{7, 7});
  layer.Backward(backend_.get(), 0, nullptr, w.data(), nullptr, gw.data(), gb.data(), nullptr);
  EXPECT_EQ(ToHost(backend_.get(), gw, 4), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(ToHost(backend_.get(), gb, 2), (std::vector<float>{0, 0}));
}

TEST_F(LayersTest, ReluForwardAndBackward) {
  Relu relu(3);
  BackendBuffer<float> x = ToBackend(backend_.get(), std::vector<float>{-1, 0, 2, 3, -4, 0.5f});
  relu.Forward(backend_.get(), 2, x.data(), x.data());  // in place
  EXPECT_EQ(ToHost(backend_.get(), x, 6), (std::vector<float>{0, 0, 2, 3, 0, 0.5f}));
  BackendBuffer<float> dy = ToBackend(backend_.get(), std::vector<float>{1, 2, 3, 4, 5, 6});
  relu.Backward(backend_.get(), 2, x.data(), dy.data(), dy.data());
  EXPECT_EQ(ToHost(backend_.get(), dy, 6), (std::vector<float>{0, 0, 3, 4, 0, 6}));
}

TEST_F(LayersTest, ReluBackwardMatchesFiniteDifferences) {
  const int n = 4, features = 5;
  Relu relu(features);
  // Keep inputs away from the kink at 0 so the finite difference sees one side only.
  std::vector<float> x = RandomVector(n * features, 21);
  for (float& v : x) v += v >= 0 ? 0.1f : -0.1f;
  const std::vector<float> r = RandomVector(n * features, 22);
  auto loss = [&]() {
    BackendBuffer<float> bx = ToBackend(backend_.get(), x);
    relu.Forward(backend_.get(), n, bx.data(), bx.data());
    return Dot(ToHost(backend_.get(), bx, n * features), r);
  };
  BackendBuffer<float> y = ToBackend(backend_.get(), x);
  relu.Forward(backend_.get(), n, y.data(), y.data());
  BackendBuffer<float> dy = ToBackend(backend_.get(), r);
  BackendBuffer<float> dx(backend_.get());
  ASSERT_TRUE(dx.Reserve(n * features).ok());
  relu.Backward(backend_.get(), n, y.data(), dy.data(), dx.data());
  ExpectMatchesFiniteDifferences("relu dx", &x, loss, ToHost(backend_.get(), dx, n * features));
}

TEST_F(LayersTest, SoftmaxCrossEntropyKnownValues) {
  SoftmaxCrossEntropy xent(2);
  // Row 0: equal logits, label 0: loss log 2, arg-max ties go to the first class -> correct.
  // Row 1: logits {1000, 0}, label 1: loss 1000 without overflow, wrong.
  BackendBuffer<float> z = ToBackend(backend_.get(), std::vector<float>{0, 0, 1000, 0});
  BackendBuffer<int32_t> labels = ToBackend(backend_.get(), std::vector<int32_t>{0, 1});
  BackendBuffer<float> dz(backend_.get());
  ASSERT_TRUE(dz.Reserve(4).ok());
  const XentResult result = xent.ForwardBackward(backend_.get(), 2, z.data(), labels.data(), 0.5f, dz.data());
  EXPECT_NEAR(result.loss_sum, std::log(2.0) + 1000.0, 1e-9);
  EXPECT_EQ(result.correct, 1);
  const std::vector<float> d = ToHost(backend_.get(), dz, 4);
  EXPECT_NEAR(d[0], 0.5f * (0.5f - 1), 1e-7);
  EXPECT_NEAR(d[1], 0.5f * 0.5f, 1e-7);
  EXPECT_NEAR(d[2], 0.5f * 1, 1e-7);
  EXPECT_NEAR(d[3], 0.5f * -1, 1e-7);

  const XentResult forward_only = xent.Forward(backend_.get(), 2, z.data(), labels.data());
  EXPECT_EQ(forward_only.loss_sum, result.loss_sum);
  EXPECT_EQ(forward_only.correct, 1);
}

TEST_F(LayersTest, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  const int n = 4, classes = 5;
  const float scale = 1.0f / n;
  SoftmaxCrossEntropy xent(classes);
  std::vector<float> z = RandomVector(n * classes, 31, -2.0f, 2.0f);
  const std::vector<int32_t> labels_host = {0, 4, 2, 2};
  BackendBuffer<int32_t> labels = ToBackend(backend_.get(), labels_host);
  auto loss = [&]() {
    BackendBuffer<float> bz = ToBackend(backend_.get(), z);
    return scale * xent.Forward(backend_.get(), n, bz.data(), labels.data()).loss_sum;
  };
  BackendBuffer<float> bz = ToBackend(backend_.get(), z);
  // dlogits written over the logits themselves, as allowed.
  xent.ForwardBackward(backend_.get(), n, bz.data(), labels.data(), scale, bz.data());
  ExpectMatchesFiniteDifferences("dlogits", &z, loss, ToHost(backend_.get(), bz, n * classes));
}

}  // namespace
}  // namespace model
}  // namespace pstrain
