#include "model/mlp.h"

#include <algorithm>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/init.h"
#include "model/model_common.h"

namespace pstrain {
namespace model {
absl::Status ValidateMlpLayerSizes(const std::vector<int>& layer_sizes) {
  if (layer_sizes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp layer sizes [", absl::StrJoin(layer_sizes, ", "),
                     "]: expected at least 2 entries (input, ..., classes)"));
  }
  for (size_t i = 0; i < layer_sizes.size(); ++i) {
    if (layer_sizes[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp layer sizes [", absl::StrJoin(layer_sizes, ", "), "]: entry ", i,
                       " is ", layer_sizes[i], ", expected > 0"));
    }
  }
  if (layer_sizes.back() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp layer sizes [", absl::StrJoin(layer_sizes, ", "),
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
    : layer_sizes_(std::move(layer_sizes)),
      params_(MlpParamSpecs(layer_sizes_)),
      num_parameters_(TotalElements(params_)),
      backend_(backend),
      loss_(layer_sizes_.back()),
      weights_(backend),
      grads_(backend),
      delta_{BackendBuffer<float>(backend), BackendBuffer<float>(backend)},
      labels_(backend) {
  for (size_t i = 0; i + 1 < layer_sizes_.size(); ++i) {
    linears_.emplace_back(layer_sizes_[i], layer_sizes_[i + 1]);
    if (i + 2 < layer_sizes_.size()) relus_.emplace_back(layer_sizes_[i + 1]);
  }
  for (size_t i = 0; i < layer_sizes_.size(); ++i) acts_.emplace_back(backend);
}

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const std::vector<int>& layer_sizes,
                                                 Backend* backend) {
  CHECK(backend != nullptr);
  RETURN_IF_ERROR(ValidateMlpLayerSizes(layer_sizes));
  std::unique_ptr<Mlp> mlp(new Mlp(layer_sizes, backend));
  RETURN_IF_ERROR(mlp->weights_.Reserve(mlp->num_parameters_));
  RETURN_IF_ERROR(mlp->grads_.Reserve(mlp->num_parameters_));
  backend->Fill(mlp->num_parameters_, 0.0f, mlp->weights_.data());
  return mlp;
}

absl::Status Mlp::SetParameters(absl::Span<const float> flat) {
  return UploadParameters("mlp", backend_, flat, num_parameters_, weights_.data());
}

absl::Status Mlp::GetParameters(absl::Span<float> flat) const {
  return DownloadParameters("mlp", backend_, weights_.data(), num_parameters_, flat);
}

absl::Status Mlp::InitializeParameters(uint64_t seed) {
  return SetParameters(InitialParameters(seed, params_));
}

absl::Status Mlp::CheckBatch(const float* x, const int32_t* labels, int n) const {
  return model::CheckBatch("mlp", x, labels, n, num_classes());
}

absl::Status Mlp::ReserveRows(int rows) {
  if (rows <= reserved_rows_) return absl::OkStatus();
  const int max_width = *std::max_element(layer_sizes_.begin(), layer_sizes_.end());
  for (size_t i = 0; i < acts_.size(); ++i) {
    RETURN_IF_ERROR(acts_[i].Reserve(static_cast<int64_t>(rows) * layer_sizes_[i]));
  }
  for (BackendBuffer<float>& d : delta_) {
    RETURN_IF_ERROR(d.Reserve(static_cast<int64_t>(rows) * max_width));
  }
  RETURN_IF_ERROR(labels_.Reserve(rows));
  reserved_rows_ = rows;
  return absl::OkStatus();
}

absl::Status Mlp::Forward(const float* x, const int32_t* labels, int n) {
  RETURN_IF_ERROR(ReserveRows(n));
  RETURN_IF_ERROR(backend_->Upload(x, static_cast<size_t>(n) * input_size() * sizeof(float),
                                   acts_[0].data()));
  RETURN_IF_ERROR(
      backend_->Upload(labels, static_cast<size_t>(n) * sizeof(int32_t), labels_.data()));
  for (size_t i = 0; i < linears_.size(); ++i) {
    float* y = acts_[i + 1].data();
    linears_[i].Forward(backend_, n, acts_[i].data(), weight(i), bias(i), y);
    if (i < relus_.size()) relus_[i].Forward(backend_, n, y, y);  // in place: backward needs only y
  }
  return absl::OkStatus();
}

absl::Status Mlp::ComputeGradient(const float* x, const int32_t* labels, int n,
                                  absl::Span<float> grad, BatchStats* stats, GradientSink* sink) {
  if (static_cast<int64_t>(grad.size()) != num_parameters_) {
    return absl::InvalidArgumentError(absl::StrCat("mlp ComputeGradient: gradient has room for ",
                                                   grad.size(), " floats, expected ",
                                                   num_parameters_));
  }
  RETURN_IF_ERROR(CheckBatch(x, labels, n));
  if (n == 0) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    if (sink != nullptr) sink->GradientReady(0, static_cast<int>(params_.size()));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Forward(x, labels, n));

  // d(mean loss)/d(logits) = (softmax - onehot) / n, so every gradient below is already a mean.
  float* dy = delta_[0].data();
  float* dx = delta_[1].data();
  const XentResult xent = loss_.ForwardBackward(backend_, n, acts_.back().data(), labels_.data(),
                                                1.0f / static_cast<float>(n), dy);
  for (int i = static_cast<int>(linears_.size()) - 1; i >= 0; --i) {
    float* dw = grads_.data() + params_[2 * i].flat_offset;
    float* db = grads_.data() + params_[2 * i + 1].flat_offset;
    linears_[i].Backward(backend_, n, acts_[i].data(), weight(i), dy, dw, db,
                         i > 0 ? dx : nullptr);
    RETURN_IF_ERROR(ReportLayerGradient(backend_, params_, i, grads_.data(), grad, sink));
    if (i > 0) {
      relus_[i - 1].Backward(backend_, n, acts_[i].data(), dx, dx);
      std::swap(dy, dx);
    }
  }
  if (sink == nullptr) {
    RETURN_IF_ERROR(backend_->Download(grads_.data(), grad.size() * sizeof(float), grad.data()));
  }
  if (stats != nullptr) {
    stats->loss_sum += xent.loss_sum;
    stats->correct += xent.correct;
    stats->samples += n;
  }
  return absl::OkStatus();
}

absl::Status Mlp::Evaluate(const float* x, const int32_t* labels, int n, BatchStats* stats) {
  RETURN_IF_ERROR(CheckBatch(x, labels, n));
  BatchStats total;
  for (int start = 0; start < n; start += kEvalBatch) {
    const int rows = std::min(kEvalBatch, n - start);
    RETURN_IF_ERROR(Forward(x + static_cast<int64_t>(start) * input_size(), labels + start, rows));
    const XentResult xent = loss_.Forward(backend_, rows, acts_.back().data(), labels_.data());
    total.loss_sum += xent.loss_sum;
    total.correct += xent.correct;
    total.samples += rows;
  }
  RETURN_IF_ERROR(backend_->Synchronize());
  if (stats != nullptr) {
    stats->loss_sum += total.loss_sum;
    stats->correct += total.correct;
    stats->samples += total.samples;
  }
  return absl::OkStatus();
}

}  // namespace model
}  // namespace pstrain
