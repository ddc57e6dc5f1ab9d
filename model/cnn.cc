#include "model/cnn.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/init.h"

namespace pstrain {
namespace model {
namespace {

// The architecture's fixed geometry.
constexpr int kKernel = 5;
constexpr int kPadding = 2;  // "same" convolution: output size = input size
constexpr int kPool = 2;     // 2x2 windows, stride 2

// Tensor indices in CnnParamSpecs order.
enum Tensor { kConv1W, kConv1B, kConv2W, kConv2B, kFc1W, kFc1B, kFc2W, kFc2B };

ParamSpec MakeSpec(std::string name, std::vector<int64_t> shape, InitKind init, int64_t fan_in, int64_t fan_out,
                   int64_t* offset) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.num_elements = 1;
  for (int64_t d : shape) spec.num_elements *= d;
  spec.shape = std::move(shape);
  spec.flat_offset = *offset;
  spec.init = init;
  spec.fan_in = fan_in;
  spec.fan_out = fan_out;
  *offset += spec.num_elements;
  return spec;
}

}  // namespace

std::string CnnShape::DebugString() const {
  return absl::StrCat(input_channels, "x", input_height, "x", input_width, " conv ", conv1_channels, ",",
                      conv2_channels, " hidden ", hidden, " classes ", classes);
}

absl::Status ValidateCnnShape(const CnnShape& shape) {
  const std::string where = absl::StrCat("cnn shape ", shape.DebugString(), ": ");
  const std::pair<const char*, int> sizes[] = {{"input_channels", shape.input_channels},
                                               {"input_height", shape.input_height},
                                               {"input_width", shape.input_width},
                                               {"conv1_channels", shape.conv1_channels},
                                               {"conv2_channels", shape.conv2_channels},
                                               {"hidden", shape.hidden},
                                               {"classes", shape.classes}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, name, " is ", value, ", expected > 0"));
    }
  }
  if (shape.classes < 2) {
    return absl::InvalidArgumentError(absl::StrCat(where, "expected at least 2 classes, got ", shape.classes));
  }
  // Two 2x2/2 poolings each halve the image (rounding down); the second needs a 2x2 input.
  if (shape.input_height < 2 * kPool || shape.input_width < 2 * kPool) {
    return absl::InvalidArgumentError(absl::StrCat(where, "input ", shape.input_height, "x", shape.input_width,
                                                   " is too small, expected "
                                                   "height and width >= ",
                                                   2 * kPool));
  }
  // The kernels take int sizes: every per-row activation and every tensor must fit in one.
  const int64_t h1 = shape.input_height / kPool, w1 = shape.input_width / kPool;
  const int64_t flat = int64_t{shape.conv2_channels} * (h1 / kPool) * (w1 / kPool);
  const std::pair<const char*, int64_t> widths[] = {
      {"input image", int64_t{shape.input_channels} * shape.input_height * shape.input_width},
      {"conv1 activation", int64_t{shape.conv1_channels} * shape.input_height * shape.input_width},
      {"conv2 weight", int64_t{shape.conv2_channels} * shape.conv1_channels * kKernel * kKernel},
      {"conv2 activation", int64_t{shape.conv2_channels} * h1 * w1},
      {"fc1 weight", flat * shape.hidden},
      {"fc2 weight", int64_t{shape.hidden} * shape.classes}};
  for (const auto& [name, count] : widths) {
    if (count > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, name, " has ", count, " elements, expected at most ", std::numeric_limits<int>::max()));
    }
  }
  return absl::OkStatus();
}

std::vector<ParamSpec> CnnParamSpecs(const CnnShape& s) {
  const int64_t kk = kKernel * kKernel;
  const int64_t flat = int64_t{s.conv2_channels} * (s.input_height / kPool / kPool) * (s.input_width / kPool / kPool);
  const int64_t c1 = s.conv1_channels, c2 = s.conv2_channels;
  int64_t offset = 0;
  std::vector<ParamSpec> specs;
  // He for everything followed by ReLU; the output layer feeds softmax, so Glorot.
  specs.push_back(MakeSpec("conv1.weight", {c1, s.input_channels * kk}, InitKind::kHeUniform, s.input_channels * kk,
                           c1 * kk, &offset));
  specs.push_back(MakeSpec("conv1.bias", {c1}, InitKind::kZeros, s.input_channels * kk, c1 * kk, &offset));
  specs.push_back(MakeSpec("conv2.weight", {c2, c1 * kk}, InitKind::kHeUniform, c1 * kk, c2 * kk, &offset));
  specs.push_back(MakeSpec("conv2.bias", {c2}, InitKind::kZeros, c1 * kk, c2 * kk, &offset));
  specs.push_back(MakeSpec("fc1.weight", {flat, s.hidden}, InitKind::kHeUniform, flat, s.hidden, &offset));
  specs.push_back(MakeSpec("fc1.bias", {s.hidden}, InitKind::kZeros, flat, s.hidden, &offset));
  specs.push_back(
      MakeSpec("fc2.weight", {s.hidden, s.classes}, InitKind::kGlorotUniform, s.hidden, s.classes, &offset));
  specs.push_back(MakeSpec("fc2.bias", {s.classes}, InitKind::kZeros, s.hidden, s.classes, &offset));
  return specs;
}

Cnn::Cnn(const CnnShape& shape, Backend* backend)
    : FlatModel("cnn", CnnParamSpecs(shape), shape.classes, kEvalBatch, backend),
      shape_(shape),
      conv1_(shape.input_channels, shape.conv1_channels, kKernel, 1, kPadding, shape.input_height, shape.input_width),
      relu1_(static_cast<int>(conv1_.output_elements())),
      pool1_(shape.conv1_channels, conv1_.out_height(), conv1_.out_width(), kPool, kPool),
      conv2_(shape.conv1_channels, shape.conv2_channels, kKernel, 1, kPadding, pool1_.out_height(), pool1_.out_width()),
      relu2_(static_cast<int>(conv2_.output_elements())),
      pool2_(shape.conv2_channels, conv2_.out_height(), conv2_.out_width(), kPool, kPool),
      fc1_(static_cast<int>(pool2_.output_elements()), shape.hidden),
      relu3_(shape.hidden),
      fc2_(shape.hidden, shape.classes),
      workspace_(backend),
      x_(backend),
      a1_(backend),
      p1_(backend),
      a2_(backend),
      p2_(backend),
      h_(backend),
      logits_(backend),
      argmax1_(backend),
      argmax2_(backend),
      delta_{BackendBuffer<float>(backend), BackendBuffer<float>(backend)} {
  // The layout and the layers must agree on every tensor size.
  CHECK_EQ(params()[kConv1W].num_elements, conv1_.weight_elements());
  CHECK_EQ(params()[kConv2W].num_elements, conv2_.weight_elements());
  CHECK_EQ(params()[kFc1W].num_elements, fc1_.weight_elements());
}

absl::StatusOr<std::unique_ptr<Cnn>> Cnn::Create(const CnnShape& shape, Backend* backend) {
  CHECK(backend != nullptr);
  RETURN_IF_ERROR(ValidateCnnShape(shape));
  std::unique_ptr<Cnn> cnn(new Cnn(shape, backend));
  RETURN_IF_ERROR(cnn->AllocateParameters());
  RETURN_IF_ERROR(
      cnn->workspace_.Reserve(std::max(cnn->conv1_.workspace_elements(), cnn->conv2_.workspace_elements())));
  return cnn;
}

absl::Status Cnn::ReserveRows(int rows, bool with_deltas) {
  if (rows > reserved_rows_) {
    const int64_t r = rows;
    RETURN_IF_ERROR(x_.Reserve(r * conv1_.input_elements()));
    RETURN_IF_ERROR(a1_.Reserve(r * conv1_.output_elements()));
    RETURN_IF_ERROR(p1_.Reserve(r * pool1_.output_elements()));
    RETURN_IF_ERROR(argmax1_.Reserve(r * pool1_.output_elements()));
    RETURN_IF_ERROR(a2_.Reserve(r * conv2_.output_elements()));
    RETURN_IF_ERROR(p2_.Reserve(r * pool2_.output_elements()));
    RETURN_IF_ERROR(argmax2_.Reserve(r * pool2_.output_elements()));
    RETURN_IF_ERROR(h_.Reserve(r * shape_.hidden));
    RETURN_IF_ERROR(logits_.Reserve(r * shape_.classes));
    reserved_rows_ = rows;
  }
  if (with_deltas && rows > reserved_delta_rows_) {
    // Every gradient w.r.t. an activation; the input needs none (conv1 skips dx).
    const int64_t max_width = std::max({conv1_.output_elements(), pool1_.output_elements(), conv2_.output_elements(),
                                        pool2_.output_elements(), int64_t{shape_.hidden}, int64_t{shape_.classes}});
    for (BackendBuffer<float>& d : delta_) {
      RETURN_IF_ERROR(d.Reserve(static_cast<int64_t>(rows) * max_width));
    }
    reserved_delta_rows_ = rows;
  }
  return absl::OkStatus();
}

absl::Status Cnn::Forward(const float* x, int n) {
  Backend* b = backend();
  RETURN_IF_ERROR(b->Upload(x, static_cast<size_t>(n) * input_size() * sizeof(float), x_.data()));
  // ReLUs run in place: their backward needs only the output.
  conv1_.Forward(b, n, x_.data(), weight(kConv1W), weight(kConv1B), a1_.data(), workspace_.data());
  relu1_.Forward(b, n, a1_.data(), a1_.data());
  pool1_.Forward(b, n, a1_.data(), p1_.data(), argmax1_.data());
  conv2_.Forward(b, n, p1_.data(), weight(kConv2W), weight(kConv2B), a2_.data(), workspace_.data());
  relu2_.Forward(b, n, a2_.data(), a2_.data());
  pool2_.Forward(b, n, a2_.data(), p2_.data(), argmax2_.data());
  // Flatten is free: p2_ {n, C, H, W} is already the row-major {n, C*H*W} fc1 reads.
  fc1_.Forward(b, n, p2_.data(), weight(kFc1W), weight(kFc1B), h_.data());
  relu3_.Forward(b, n, h_.data(), h_.data());
  fc2_.Forward(b, n, h_.data(), weight(kFc2W), weight(kFc2B), logits_.data());
  return absl::OkStatus();
}

absl::Status Cnn::Backward(int n, const std::function<absl::Status(int layer)>& layer_done) {
  Backend* b = backend();
  float* d0 = delta_[0].data();  // holds d(loss)/d(logits) on entry
  float* d1 = delta_[1].data();
  // Weight/bias pair k is layer k.
  fc2_.Backward(b, n, h_.data(), weight(kFc2W), d0, grad(kFc2W), grad(kFc2B), d1);
  RETURN_IF_ERROR(layer_done(kFc2W / 2));
  relu3_.Backward(b, n, h_.data(), d1, d1);
  fc1_.Backward(b, n, p2_.data(), weight(kFc1W), d1, grad(kFc1W), grad(kFc1B), d0);
  RETURN_IF_ERROR(layer_done(kFc1W / 2));
  pool2_.Backward(b, n, argmax2_.data(), d0, d1);
  relu2_.Backward(b, n, a2_.data(), d1, d1);
  conv2_.Backward(b, n, p1_.data(), weight(kConv2W), d1, grad(kConv2W), grad(kConv2B), d0, workspace_.data());
  RETURN_IF_ERROR(layer_done(kConv2W / 2));
  pool1_.Backward(b, n, argmax1_.data(), d0, d1);
  relu1_.Backward(b, n, a1_.data(), d1, d1);
  conv1_.Backward(b, n, x_.data(), weight(kConv1W), d1, grad(kConv1W), grad(kConv1B),
                  /*dx=*/nullptr, workspace_.data());
  return layer_done(kConv1W / 2);
}

}  // namespace model
}  // namespace pstrain
