// A multi-layer perceptron classifier: Linear -> ReLU -> ... -> Linear -> softmax cross-entropy.
//
// All parameters live in one flat vector in the MlpParamSpecs layout, the same layout the
// parameter servers shard and the model file stores, so a pulled weight vector loads with one
// SetParameters and a computed gradient pushes as is.
//
// All arithmetic runs on the borrowed Backend; inputs and outputs of the public methods are host
// memory. Scratch buffers grow to the largest batch seen and are then reused.
//
// Thread safety: not thread-safe (one Mlp per training thread, each with its own Backend).
#ifndef PSTRAIN_MODEL_MLP_H_
#define PSTRAIN_MODEL_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/backend.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/param_spec.h"
#include "model/relu.h"
#include "model/softmax_xent.h"

namespace pstrain {
namespace model {

// The parameter layout of an MLP with the given layer sizes (input, hidden..., classes). For
// {784, 256, 128, 10}:
//   0 fc1.weight {784, 256} He       1 fc1.bias {256} zeros
//   2 fc2.weight {256, 128} He       3 fc2.bias {128} zeros
//   4 fc3.weight {128, 10}  Glorot   5 fc3.bias {10}  zeros
// tensor_id (for model/init.h) = index in this list. REQUIRES: sizes valid (see Mlp::Create).
std::vector<ParamSpec> MlpParamSpecs(const std::vector<int>& layer_sizes);

// OK for layer sizes an Mlp can be built with: at least 2 entries, all > 0, classes >= 2;
// otherwise INVALID_ARGUMENT naming the bad entry.
absl::Status ValidateMlpLayerSizes(const std::vector<int>& layer_sizes);

class Mlp : public Model {
 public:
  // layer_sizes: input, hidden..., classes; at least 2 entries, all > 0 and classes >= 2, else
  // INVALID_ARGUMENT. `backend` is borrowed and must outlive the Mlp. Parameters start at zero;
  // call SetParameters or InitializeParameters before training. Errors from the backend's
  // Allocate pass through.
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(const std::vector<int>& layer_sizes,
                                                     Backend* backend);

  const std::vector<ParamSpec>& params() const override { return params_; }
  int64_t num_parameters() const override { return num_parameters_; }
  int input_size() const override { return layer_sizes_.front(); }
  int num_classes() const override { return layer_sizes_.back(); }
  const std::vector<int>& layer_sizes() const { return layer_sizes_; }

  // Loads every weight from `flat` (num_parameters() host floats, params() layout).
  // Wrong size -> INVALID_ARGUMENT.
  absl::Status SetParameters(absl::Span<const float> flat) override;

  // Copies the current weights into `flat` (num_parameters() floats). Wrong size ->
  // INVALID_ARGUMENT.
  absl::Status GetParameters(absl::Span<float> flat) const override;

  // Sets every weight to its model/init.h initial value for `seed` (what the servers start from).
  absl::Status InitializeParameters(uint64_t seed) override;

  // Forward and backward pass over n samples: x holds n * input_size() row-major floats, labels
  // n values in [0, num_classes()). Writes the MEAN gradient over the n samples of the mean
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

  static constexpr int kEvalBatch = 1024;

 private:
  Mlp(std::vector<int> layer_sizes, Backend* backend);

  absl::Status CheckBatch(const float* x, const int32_t* labels, int n) const;
  // Makes every activation buffer hold at least `rows` rows.
  absl::Status ReserveRows(int rows);
  // Uploads rows [0, n) of x and labels and runs the forward pass; logits end in acts_.back().
  absl::Status Forward(const float* x, const int32_t* labels, int n);

  const float* weight(int layer) const { return weights_.data() + params_[2 * layer].flat_offset; }
  const float* bias(int layer) const { return weights_.data() + params_[2 * layer + 1].flat_offset; }

  // Constant after construction.
  const std::vector<int> layer_sizes_;
  const std::vector<ParamSpec> params_;
  const int64_t num_parameters_;
  Backend* const backend_;  // borrowed
  std::vector<Linear> linears_;
  std::vector<Relu> relus_;  // after every Linear but the last
  SoftmaxCrossEntropy loss_;

  // Backend memory.
  BackendBuffer<float> weights_;  // num_parameters_, params_ layout
  BackendBuffer<float> grads_;    // num_parameters_, params_ layout
  // acts_[0] = input rows; acts_[i + 1] = output of layer i (after its ReLU); acts_.back() = logits.
  std::vector<BackendBuffer<float>> acts_;
  BackendBuffer<float> delta_[2];  // ping-pong gradients w.r.t. activations, max width per row
  BackendBuffer<int32_t> labels_;
  int reserved_rows_ = 0;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_MLP_H_
