// A small convolutional classifier for NCHW images:
//
//   conv 5x5 (pad 2) -> ReLU -> maxpool 2x2/2 -> conv 5x5 (pad 2) -> ReLU -> maxpool 2x2/2
//     -> flatten -> Linear -> ReLU -> Linear -> softmax cross-entropy
//
// The public surface matches Mlp's (Create, params(), SetParameters, ComputeGradient, Evaluate,
// BatchStats, ...) so a worker can drive either model the same way. All parameters live in one
// flat vector in the CnnParamSpecs layout, which the parameter servers shard and the model file
// stores, so a pulled weight vector loads with one SetParameters and a computed gradient pushes
// as is.
//
// All arithmetic runs on the borrowed Backend; inputs and outputs of the public methods are host
// memory (inputs are images flattened NCHW, i.e. input_size() floats per sample). Scratch buffers
// grow to the largest batch seen and are then reused.
//
// Thread safety: not thread-safe (one Cnn per training thread, each with its own Backend).
#ifndef PSTRAIN_MODEL_CNN_H_
#define PSTRAIN_MODEL_CNN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/backend.h"
#include "model/conv2d.h"
#include "model/linear.h"
#include "model/max_pool2d.h"
#include "model/model.h"
#include "model/param_spec.h"
#include "model/relu.h"
#include "model/softmax_xent.h"

namespace pstrain {
namespace model {

// The sizes of a Cnn. Kernels (5x5, padding 2, so a convolution keeps the image size) and pooling
// (2x2, stride 2, so it halves it, rounding down) are fixed by the architecture.
//
// hidden defaults to 128, not the 1024 of the classic MNIST CNN: the fully connected layer holds
// most of the parameters (64*7*7 x hidden), and every training step pushes and pulls all of them
// through the parameter servers. At 128 the model is ~455k floats (~1.8 MB per push), the conv
// layers dominate compute on 2 CPU cores either way, and Fashion-MNIST accuracy is still limited
// by the conv features rather than by the width of this layer.
struct CnnShape {
  int input_channels = 1;
  int input_height = 28;
  int input_width = 28;
  int conv1_channels = 32;
  int conv2_channels = 64;
  int hidden = 128;
  int classes = 10;

  // "1x28x28 conv 32,64 hidden 128 classes 10": for errors and logs.
  std::string DebugString() const;
};

// OK when a Cnn of this shape can be built; otherwise INVALID_ARGUMENT naming the shape, the bad
// size and what was expected (all sizes > 0, classes >= 2, and an image large enough that both
// poolings keep at least one pixel: height and width >= 4).
absl::Status ValidateCnnShape(const CnnShape& shape);

// The parameter layout of a Cnn. For the default shape:
//   0 conv1.weight {32, 1*5*5}     He      1 conv1.bias {32}   zeros
//   2 conv2.weight {64, 32*5*5}    He      3 conv2.bias {64}   zeros
//   4 fc1.weight   {64*7*7, 128}   He      5 fc1.bias   {128}  zeros
//   6 fc2.weight   {128, 10}       Glorot  7 fc2.bias   {10}   zeros
// A conv weight row is one filter flattened as (in channel, kh, kw) (see model/conv2d.h); its
// fan_in is in_c*5*5 and fan_out out_c*5*5. tensor_id (for model/init.h) = index in this list.
// REQUIRES: ValidateCnnShape(shape) is OK.
std::vector<ParamSpec> CnnParamSpecs(const CnnShape& shape);

class Cnn : public Model {
 public:
  // INVALID_ARGUMENT for a shape ValidateCnnShape refuses. `backend` is borrowed and must outlive
  // the Cnn. Parameters start at zero; call SetParameters or InitializeParameters before
  // training. Errors from the backend's Allocate pass through.
  static absl::StatusOr<std::unique_ptr<Cnn>> Create(const CnnShape& shape, Backend* backend);

  const std::vector<ParamSpec>& params() const override { return params_; }
  int64_t num_parameters() const override { return num_parameters_; }
  // Floats per sample: input_channels * input_height * input_width.
  int input_size() const override { return static_cast<int>(conv1_.input_elements()); }
  int num_classes() const override { return shape_.classes; }

  // Loads every weight from `flat` (num_parameters() host floats, params() layout).
  // Wrong size -> INVALID_ARGUMENT.
  absl::Status SetParameters(absl::Span<const float> flat) override;

  // Copies the current weights into `flat` (num_parameters() floats). Wrong size ->
  // INVALID_ARGUMENT.
  absl::Status GetParameters(absl::Span<float> flat) const override;

  // Sets every weight to its model/init.h initial value for `seed` (what the servers start from).
  absl::Status InitializeParameters(uint64_t seed) override;

  // Forward and backward pass over n samples: x holds n * input_size() floats (NCHW), labels n
  // values in [0, num_classes()). Writes the MEAN gradient over the n samples of the mean
  // cross-entropy into `grad` (num_parameters() floats, params() layout) and adds the loss sum,
  // correct count and n to *stats (stats may be null). n == 0: grad all zeros, stats unchanged.
  // INVALID_ARGUMENT for n < 0, a wrong grad size, or a label out of range (naming the sample and
  // the label); nothing is written to *stats then. Any n >= 0 works: buffers grow. With a sink,
  // each layer's gradient is downloaded and reported as soon as backward produced it (see
  // GradientSink); without one, the whole gradient is downloaded at the end in one copy.
  using Model::ComputeGradient;
  absl::Status ComputeGradient(const float* x, const int32_t* labels, int n,
                               absl::Span<float> grad, BatchStats* stats, GradientSink* sink) override;

  // Forward only; adds the loss sum, correct count and n to *stats. Runs in batches of
  // kEvalBatch rows, so n may be the whole test set. Errors as for ComputeGradient.
  absl::Status Evaluate(const float* x, const int32_t* labels, int n, BatchStats* stats) override;

  // Smaller than Mlp's: the first conv activation alone is conv1_channels*H*W floats per row
  // (25088 for the default shape, ~25 MB at 256 rows).
  static constexpr int kEvalBatch = 256;

 private:
  Cnn(const CnnShape& shape, Backend* backend);

  absl::Status CheckBatch(const float* x, const int32_t* labels, int n) const;
  // Makes every activation buffer hold at least `rows` rows; with_deltas also the gradient
  // buffers, which evaluation never needs.
  absl::Status ReserveRows(int rows, bool with_deltas);
  // Uploads rows [0, n) of x and labels and runs the forward pass; logits end in logits_.
  absl::Status Forward(const float* x, const int32_t* labels, int n);

  // Tensor t of params() inside the weights / gradients buffer.
  const float* weight(int t) const { return weights_.data() + params_[t].flat_offset; }
  float* grad(int t) { return grads_.data() + params_[t].flat_offset; }

  // Constant after construction.
  const CnnShape shape_;
  const std::vector<ParamSpec> params_;
  const int64_t num_parameters_;
  Backend* const backend_;  // borrowed
  const Conv2d conv1_;
  const Relu relu1_;
  const MaxPool2d pool1_;
  const Conv2d conv2_;
  const Relu relu2_;
  const MaxPool2d pool2_;
  const Linear fc1_;
  const Relu relu3_;
  const Linear fc2_;
  const SoftmaxCrossEntropy loss_;

  // Backend memory.
  BackendBuffer<float> weights_;    // num_parameters_, params_ layout
  BackendBuffer<float> grads_;      // num_parameters_, params_ layout
  BackendBuffer<float> workspace_;  // the larger conv workspace; independent of the batch size
  // Activations, per row: input, conv1 (after ReLU, in place), pool1, conv2 (after ReLU), pool2
  // (= the flattened fc1 input), fc1 (after ReLU), logits.
  BackendBuffer<float> x_, a1_, p1_, a2_, p2_, h_, logits_;
  BackendBuffer<int32_t> argmax1_, argmax2_;  // pool1_ / pool2_ outputs' argmax
  BackendBuffer<float> delta_[2];  // ping-pong gradients w.r.t. activations, max width per row
  BackendBuffer<int32_t> labels_;
  int reserved_rows_ = 0;
  int reserved_delta_rows_ = 0;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CNN_H_
