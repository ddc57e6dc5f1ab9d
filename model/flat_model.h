// What every model here does the same way, whatever its layers: its parameters and their
// gradients live in two flat backend buffers in its params() layout, the labels of a batch in a
// third, and the loss is softmax cross-entropy. FlatModel implements Model's public contract once
// (the size and label checks, loading and reading parameters, their initial values, the gradient
// step with its sink, evaluation in batches); a subclass (Mlp, Cnn) supplies only its layers:
// buffers per row, the forward pass to logits, and the backward pass from them.
//
// Thread safety: not thread-safe (one model per training thread, each with its own Backend).
#ifndef PSTRAIN_MODEL_FLAT_MODEL_H_
#define PSTRAIN_MODEL_FLAT_MODEL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/backend.h"
#include "model/model.h"
#include "model/param_spec.h"
#include "model/softmax_xent.h"

namespace pstrain {
namespace model {

class FlatModel : public Model {
 public:
  const std::vector<ParamSpec>& params() const final { return params_; }
  int64_t num_parameters() const final { return num_parameters_; }
  int num_classes() const final { return loss_.classes(); }

  // Model's contract (model/model.h); errors name the model ("mlp SetParameters: got 3 floats,
  // expected 10", "cnn batch: sample 4 has label 12, expected [0, 10)").
  absl::Status SetParameters(absl::Span<const float> flat) final;
  absl::Status GetParameters(absl::Span<float> flat) const final;
  absl::Status InitializeParameters(uint64_t seed) final;
  using Model::ComputeGradient;
  // Without a sink the whole gradient is downloaded at the end in one copy; with one, each layer's
  // as soon as backward produced it.
  absl::Status ComputeGradient(const float* x, const int32_t* labels, int n, absl::Span<float> grad, BatchStats* stats,
                               GradientSink* sink) final;
  // Runs in batches of the subclass's eval_batch rows.
  absl::Status Evaluate(const float* x, const int32_t* labels, int n, BatchStats* stats) final;

 protected:
  // `name` names the model in errors; evaluation runs `eval_batch` rows at a time. Parameters and
  // gradients are allocated by AllocateParameters, which the subclass's Create calls.
  FlatModel(const char* name, std::vector<ParamSpec> params, int classes, int eval_batch, Backend* backend);

  // Allocates the parameter and gradient buffers; parameters start at zero.
  absl::Status AllocateParameters();

  // Makes the activation buffers hold at least `rows` rows; with_deltas also the buffers backward
  // needs (evaluation never does).
  virtual absl::Status ReserveRows(int rows, bool with_deltas) = 0;
  // Uploads rows [0, n) of x (host) and runs the forward pass to logits(); called after
  // ReserveRows(n, ...).
  virtual absl::Status Forward(const float* x, int n) = 0;
  // n x classes logits of the last Forward, in backend memory.
  virtual const float* logits() const = 0;
  // Where backward starts: ComputeGradient writes d(mean loss)/d(logits) here (n x classes).
  virtual float* dlogits() = 0;
  // Backward from dlogits() into the gradient buffer (grad(t)), calling layer_done(k) once the
  // gradients of tensors 2k and 2k+1 (layer k's weight and bias) are complete, last layer first.
  virtual absl::Status Backward(int n, const std::function<absl::Status(int layer)>& layer_done) = 0;

  Backend* backend() const { return backend_; }
  // Tensor t of params() inside the parameter / gradient buffer.
  const float* weight(int t) const { return weights_.data() + params_[t].flat_offset; }
  float* grad(int t) { return grads_.data() + params_[t].flat_offset; }

 private:
  absl::Status CheckBatch(const float* x, const int32_t* labels, int n) const;
  // ReserveRows plus the labels, then the labels' upload and Forward.
  absl::Status RunForward(const float* x, const int32_t* labels, int n, bool with_deltas);

  const char* const name_;
  const std::vector<ParamSpec> params_;
  const int64_t num_parameters_;
  const int eval_batch_;
  Backend* const backend_;  // borrowed
  const SoftmaxCrossEntropy loss_;

  // Backend memory.
  BackendBuffer<float> weights_;  // num_parameters_, params_ layout
  BackendBuffer<float> grads_;    // num_parameters_, params_ layout
  BackendBuffer<int32_t> labels_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_FLAT_MODEL_H_
