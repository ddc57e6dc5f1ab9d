#include "model/flat_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/init.h"

namespace pstrain {
namespace model {

FlatModel::FlatModel(const char* name, std::vector<ParamSpec> params, int classes, int eval_batch, Backend* backend)
    : name_(name),
      params_(std::move(params)),
      num_parameters_(TotalElements(params_)),
      eval_batch_(eval_batch),
      backend_(backend),
      loss_(classes),
      weights_(backend),
      grads_(backend),
      labels_(backend) {
  CHECK(backend != nullptr);
  CHECK_GT(eval_batch, 0);
}

absl::Status FlatModel::AllocateParameters() {
  RETURN_IF_ERROR(weights_.Reserve(num_parameters_));
  RETURN_IF_ERROR(grads_.Reserve(num_parameters_));
  backend_->Fill(num_parameters_, 0.0f, weights_.data());
  return absl::OkStatus();
}

absl::Status FlatModel::SetParameters(absl::Span<const float> flat) {
  if (static_cast<int64_t>(flat.size()) != num_parameters_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " SetParameters: got ", flat.size(), " floats, expected ", num_parameters_));
  }
  return backend_->Upload(flat.data(), flat.size() * sizeof(float), weights_.data());
}

absl::Status FlatModel::GetParameters(absl::Span<float> flat) const {
  if (static_cast<int64_t>(flat.size()) != num_parameters_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " GetParameters: got room for ", flat.size(), " floats, expected ", num_parameters_));
  }
  return backend_->Download(weights_.data(), flat.size() * sizeof(float), flat.data());
}

absl::Status FlatModel::InitializeParameters(uint64_t seed) {
  std::vector<float> flat(num_parameters_);
  for (size_t t = 0; t < params_.size(); ++t) {
    const ParamSpec& spec = params_[t];
    FillInitialValues(seed, static_cast<int>(t), spec, 0, spec.num_elements, flat.data() + spec.flat_offset);
  }
  return SetParameters(flat);
}

absl::Status FlatModel::CheckBatch(const float* x, const int32_t* labels, int n) const {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(name_, " batch: got n = ", n, ", expected >= 0"));
  if (n > 0 && (x == nullptr || labels == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(name_, " batch of ", n, " samples: inputs or labels are null"));
  }
  const int classes = num_classes();
  for (int i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, " batch: sample ", i, " has label ", labels[i], ", expected [0, ", classes, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status FlatModel::RunForward(const float* x, const int32_t* labels, int n, bool with_deltas) {
  RETURN_IF_ERROR(ReserveRows(n, with_deltas));
  RETURN_IF_ERROR(labels_.Reserve(n));
  RETURN_IF_ERROR(backend_->Upload(labels, static_cast<size_t>(n) * sizeof(int32_t), labels_.data()));
  return Forward(x, n);
}

absl::Status FlatModel::ComputeGradient(const float* x, const int32_t* labels, int n, absl::Span<float> grad_out,
                                        BatchStats* stats, GradientSink* sink) {
  if (static_cast<int64_t>(grad_out.size()) != num_parameters_) {
    return absl::InvalidArgumentError(absl::StrCat(name_, " ComputeGradient: gradient has room for ", grad_out.size(),
                                                   " floats, expected ", num_parameters_));
  }
  RETURN_IF_ERROR(CheckBatch(x, labels, n));
  if (n == 0) {
    std::fill(grad_out.begin(), grad_out.end(), 0.0f);
    if (sink != nullptr) sink->GradientReady(0, static_cast<int>(params_.size()));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(RunForward(x, labels, n, /*with_deltas=*/true));
  // d(mean loss)/d(logits) = (softmax - onehot) / n, so every gradient backward makes is a mean.
  const XentResult xent =
      loss_.ForwardBackward(backend_, n, logits(), labels_.data(), 1.0f / static_cast<float>(n), dlogits());
  RETURN_IF_ERROR(Backward(n, [&](int layer) -> absl::Status {
    if (sink == nullptr) return absl::OkStatus();  // downloaded at the end, in one copy
    // Layer k owns the tensor pair (2k, 2k+1), adjacent in the flat layout.
    const int64_t begin = params_[2 * layer].flat_offset;
    const int64_t end = params_[2 * layer + 1].flat_offset + params_[2 * layer + 1].num_elements;
    RETURN_IF_ERROR(backend_->Download(grads_.data() + begin, (end - begin) * sizeof(float), grad_out.data() + begin));
    sink->GradientReady(2 * layer, 2 * layer + 2);
    return absl::OkStatus();
  }));
  if (sink == nullptr) {
    RETURN_IF_ERROR(backend_->Download(grads_.data(), grad_out.size() * sizeof(float), grad_out.data()));
  }
  if (stats != nullptr) {
    stats->loss_sum += xent.loss_sum;
    stats->correct += xent.correct;
    stats->samples += n;
  }
  return absl::OkStatus();
}

absl::Status FlatModel::Evaluate(const float* x, const int32_t* labels, int n, BatchStats* stats) {
  RETURN_IF_ERROR(CheckBatch(x, labels, n));
  BatchStats total;
  for (int start = 0; start < n; start += eval_batch_) {
    const int rows = std::min(eval_batch_, n - start);
    RETURN_IF_ERROR(RunForward(x + static_cast<int64_t>(start) * input_size(), labels + start, rows,
                               /*with_deltas=*/false));
    const XentResult xent = loss_.Forward(backend_, rows, logits(), labels_.data());
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
