// A small convolutional classifier for NCHW images:
//
//   conv 5x5 (pad 2) -> ReLU -> maxpool 2x2/2 -> conv 5x5 (pad 2) -> ReLU -> maxpool 2x2/2
//     -> flatten -> Linear -> ReLU -> Linear -> softmax cross-entropy
//
// Like Mlp it is a FlatModel (model/flat_model.h), so a worker drives either the same way. All
// parameters live in one flat vector in the CnnParamSpecs layout, which the parameter servers
// shard and the model file stores, so a pulled weight vector loads with one SetParameters and a
// computed gradient pushes as is.
//
// All arithmetic runs on the borrowed Backend; inputs and outputs of the public methods are host
// memory (inputs are images flattened NCHW, i.e. input_size() floats per sample). Scratch buffers
// grow to the largest batch seen and are then reused.
//
// Thread safety: not thread-safe (one Cnn per training thread, each with its own Backend).
#ifndef PSTRAIN_MODEL_CNN_H_
#define PSTRAIN_MODEL_CNN_H_

#include <cstdint>
#include <functional>
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
#include "model/flat_model.h"
#include "model/param_spec.h"
#include "model/relu.h"

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

class Cnn : public FlatModel {
 public:
  // INVALID_ARGUMENT for a shape ValidateCnnShape refuses. `backend` is borrowed and must outlive
  // the Cnn. Parameters start at zero; call SetParameters or InitializeParameters before
  // training. Errors from the backend's Allocate pass through. Inputs are images flattened NCHW;
  // the rest of the public surface is Model's (model/flat_model.h).
  static absl::StatusOr<std::unique_ptr<Cnn>> Create(const CnnShape& shape, Backend* backend);

  // Floats per sample: input_channels * input_height * input_width.
  int input_size() const override { return static_cast<int>(conv1_.input_elements()); }

  // Rows per evaluation pass. Smaller than Mlp's: the first conv activation alone is
  // conv1_channels*H*W floats per row (25088 for the default shape, ~25 MB at 256 rows).
  static constexpr int kEvalBatch = 256;

 private:
  Cnn(const CnnShape& shape, Backend* backend);

  absl::Status ReserveRows(int rows, bool with_deltas) override;
  absl::Status Forward(const float* x, int n) override;
  const float* logits() const override { return logits_.data(); }
  float* dlogits() override { return delta_[0].data(); }
  absl::Status Backward(int n, const std::function<absl::Status(int layer)>& layer_done) override;

  // Constant after construction.
  const CnnShape shape_;
  const Conv2d conv1_;
  const Relu relu1_;
  const MaxPool2d pool1_;
  const Conv2d conv2_;
  const Relu relu2_;
  const MaxPool2d pool2_;
  const Linear fc1_;
  const Relu relu3_;
  const Linear fc2_;

  // Backend memory, grown to the largest batch seen.
  BackendBuffer<float> workspace_;  // the larger conv workspace; independent of the batch size
  // Activations, per row: input, conv1 (after ReLU, in place), pool1, conv2 (after ReLU), pool2
  // (= the flattened fc1 input), fc1 (after ReLU), logits.
  BackendBuffer<float> x_, a1_, p1_, a2_, p2_, h_, logits_;
  BackendBuffer<int32_t> argmax1_, argmax2_;  // pool1_ / pool2_ outputs' argmax
  BackendBuffer<float> delta_[2];             // ping-pong gradients w.r.t. activations, max width per row
  int reserved_rows_ = 0;
  int reserved_delta_rows_ = 0;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CNN_H_
