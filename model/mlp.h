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
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/backend.h"
#include "model/linear.h"
#include "model/flat_model.h"
#include "model/param_spec.h"
#include "model/relu.h"

namespace pstrain {
namespace model {

// The parameter layout of an MLP with the given layer sizes (input, hidden..., classes). For
// {784, 256, 128, 10}:
//   0 fc1.weight {784, 256} He       1 fc1.bias {256} zeros
//   2 fc2.weight {256, 128} He       3 fc2.bias {128} zeros
//   4 fc3.weight {128, 10}  Glorot   5 fc3.bias {10}  zeros
// tensor_id (for model/init.h) = index in this list. REQUIRES: at least 2 sizes, all > 0 (a
// classifier also needs classes >= 2, see Mlp::Create; the CTR model's tower ends in 1 logit).
std::vector<ParamSpec> MlpParamSpecs(const std::vector<int>& layer_sizes);

// OK for layer sizes an Mlp can be built with: at least 2 entries, all > 0, classes >= 2;
// otherwise INVALID_ARGUMENT naming the bad entry.
absl::Status ValidateMlpLayerSizes(const std::vector<int>& layer_sizes);

class Mlp : public FlatModel {
 public:
  // layer_sizes: input, hidden..., classes; at least 2 entries, all > 0 and classes >= 2, else
  // INVALID_ARGUMENT. `backend` is borrowed and must outlive the Mlp. Parameters start at zero;
  // call SetParameters or InitializeParameters before training. Errors from the backend's
  // Allocate pass through. Inputs are input_size() row-major floats per sample; the rest of the
  // public surface is Model's (model/flat_model.h).
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(const std::vector<int>& layer_sizes, Backend* backend);

  int input_size() const override { return layer_sizes_.front(); }
  const std::vector<int>& layer_sizes() const { return layer_sizes_; }

  // Rows per evaluation pass.
  static constexpr int kEvalBatch = 1024;

 private:
  Mlp(std::vector<int> layer_sizes, Backend* backend);

  absl::Status ReserveRows(int rows, bool with_deltas) override;
  absl::Status Forward(const float* x, int n) override;
  const float* logits() const override { return acts_.back().data(); }
  float* dlogits() override { return delta_[0].data(); }
  absl::Status Backward(int n, const std::function<absl::Status(int layer)>& layer_done) override;

  // Constant after construction.
  const std::vector<int> layer_sizes_;
  std::vector<Linear> linears_;
  std::vector<Relu> relus_;  // after every Linear but the last

  // Backend memory, grown to the largest batch seen.
  // acts_[0] = input rows; acts_[i + 1] = output of layer i (after its ReLU); acts_.back() = logits.
  std::vector<BackendBuffer<float>> acts_;
  BackendBuffer<float> delta_[2];  // ping-pong gradients w.r.t. activations, max width per row
  int reserved_rows_ = 0;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_MLP_H_
