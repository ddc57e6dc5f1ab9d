#include "model/mlp.h"

#include <algorithm>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/init.h"

namespace pstrain {
namespace model {
absl::Status ValidateMlpLayerSizes(const std::vector<int>& layer_sizes) {
  if (layer_sizes.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("mlp layer sizes [", absl::StrJoin(layer_sizes, ", "),
                                                   "]: expected at least 2 entries (input, ..., classes)"));
  }
  for (size_t i = 0; i < layer_sizes.size(); ++i) {
    if (layer_sizes[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("mlp layer sizes [", absl::StrJoin(layer_sizes, ", "), "]: entry ",
                                                     i, " is ", layer_sizes[i], ", expected > 0"));
    }
  }
  if (layer_sizes.back() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("mlp layer sizes [", absl::StrJoin(layer_sizes, ", "),
                                                   "]: expected at least 2 classes, got ", layer_sizes.back()));
  }
  return absl::OkStatus();
}

std::vector<ParamSpec> MlpParamSpecs(const std::vector<int>& layer_sizes) {
  std::vector<ParamSpec> specs;
  int64_t offset = 0;
  const size_t num_layers = layer_sizes.size() - 1;
  for (size_t i = 0; i < num_layers; ++i) {
    const int64_t in = layer_sizes[i];
    const int64_t out = layer_sizes[i + 1];
    const std::string prefix = absl::StrCat("fc", i + 1);

    ParamSpec weight;
    weight.name = prefix + ".weight";
    weight.shape = {in, out};
    weight.num_elements = in * out;
    weight.flat_offset = offset;
    // He suits layers followed by ReLU; the output layer feeds softmax, so Glorot.
    weight.init = i + 1 < num_layers ? InitKind::kHeUniform : InitKind::kGlorotUniform;
    weight.fan_in = in;
    weight.fan_out = out;
    offset += weight.num_elements;
    specs.push_back(std::move(weight));

    ParamSpec bias;
    bias.name = prefix + ".bias";
    bias.shape = {out};
    bias.num_elements = out;
    bias.flat_offset = offset;
    bias.init = InitKind::kZeros;
    bias.fan_in = in;
    bias.fan_out = out;
    offset += bias.num_elements;
    specs.push_back(std::move(bias));
  }
  return specs;
}

Mlp::Mlp(std::vector<int> layer_sizes, Backend* backend)
    : FlatModel("mlp", MlpParamSpecs(layer_sizes), layer_sizes.back(), kEvalBatch, backend),
      layer_sizes_(std::move(layer_sizes)),
      delta_{BackendBuffer<float>(backend), BackendBuffer<float>(backend)} {
  for (size_t i = 0; i + 1 < layer_sizes_.size(); ++i) {
    linears_.emplace_back(layer_sizes_[i], layer_sizes_[i + 1]);
    if (i + 2 < layer_sizes_.size()) relus_.emplace_back(layer_sizes_[i + 1]);
  }
  for (size_t i = 0; i < layer_sizes_.size(); ++i) acts_.emplace_back(backend);
}

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const std::vector<int>& layer_sizes, Backend* backend) {
  CHECK(backend != nullptr);
  RETURN_IF_ERROR(ValidateMlpLayerSizes(layer_sizes));
  std::unique_ptr<Mlp> mlp(new Mlp(layer_sizes, backend));
  RETURN_IF_ERROR(mlp->AllocateParameters());
  return mlp;
}

absl::Status Mlp::ReserveRows(int rows, bool /*with_deltas*/) {
  // The deltas are as wide as the widest activation: small next to the activations, so they are
  // reserved for evaluation too.
  if (rows <= reserved_rows_) return absl::OkStatus();
  const int max_width = *std::max_element(layer_sizes_.begin(), layer_sizes_.end());
  for (size_t i = 0; i < acts_.size(); ++i) {
    RETURN_IF_ERROR(acts_[i].Reserve(static_cast<int64_t>(rows) * layer_sizes_[i]));
  }
  for (BackendBuffer<float>& d : delta_) {
    RETURN_IF_ERROR(d.Reserve(static_cast<int64_t>(rows) * max_width));
  }
  reserved_rows_ = rows;
  return absl::OkStatus();
}

absl::Status Mlp::Forward(const float* x, int n) {
  Backend* b = backend();
  RETURN_IF_ERROR(b->Upload(x, static_cast<size_t>(n) * input_size() * sizeof(float), acts_[0].data()));
  for (size_t i = 0; i < linears_.size(); ++i) {
    float* y = acts_[i + 1].data();
    linears_[i].Forward(b, n, acts_[i].data(), weight(2 * i), weight(2 * i + 1), y);
    if (i < relus_.size()) relus_[i].Forward(b, n, y, y);  // in place: backward needs only y
  }
  return absl::OkStatus();
}

absl::Status Mlp::Backward(int n, const std::function<absl::Status(int layer)>& layer_done) {
  Backend* b = backend();
  float* dy = delta_[0].data();
  float* dx = delta_[1].data();
  for (int i = static_cast<int>(linears_.size()) - 1; i >= 0; --i) {
    linears_[i].Backward(b, n, acts_[i].data(), weight(2 * i), dy, grad(2 * i), grad(2 * i + 1), i > 0 ? dx : nullptr);
    RETURN_IF_ERROR(layer_done(i));
    if (i > 0) {
      relus_[i - 1].Backward(b, n, acts_[i].data(), dx, dx);
      std::swap(dy, dx);
    }
  }
  return absl::OkStatus();
}

}  // namespace model
}  // namespace pstrain
