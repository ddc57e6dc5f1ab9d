#include "model/model_common.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/init.h"
#include "model/model.h"

namespace pstrain {
namespace model {

absl::Status UploadParameters(absl::string_view model, Backend* backend, absl::Span<const float> flat,
                              int64_t expected, float* weights) {
  if (static_cast<int64_t>(flat.size()) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, " SetParameters: got ", flat.size(), " floats, expected ", expected));
  }
  return backend->Upload(flat.data(), flat.size() * sizeof(float), weights);
}

absl::Status DownloadParameters(absl::string_view model, Backend* backend, const float* weights, int64_t expected,
                                absl::Span<float> flat) {
  if (static_cast<int64_t>(flat.size()) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, " GetParameters: got room for ", flat.size(), " floats, expected ", expected));
  }
  return backend->Download(weights, flat.size() * sizeof(float), flat.data());
}

std::vector<float> InitialParameters(uint64_t seed, const std::vector<ParamSpec>& params) {
  std::vector<float> flat(TotalElements(params));
  for (size_t t = 0; t < params.size(); ++t) {
    const ParamSpec& spec = params[t];
    FillInitialValues(seed, static_cast<int>(t), spec, 0, spec.num_elements, flat.data() + spec.flat_offset);
  }
  return flat;
}

absl::Status CheckBatch(absl::string_view model, const float* x, const int32_t* labels, int n, int classes) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(model, " batch: got n = ", n, ", expected >= 0"));
  if (n > 0 && (x == nullptr || labels == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(model, " batch of ", n, " samples: inputs or labels are null"));
  }
  for (int i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat(model, " batch: sample ", i, " has label ", labels[i],
                                                     ", expected [0, ", classes, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReportLayerGradient(Backend* backend, const std::vector<ParamSpec>& params, int layer,
                                 const float* grads, absl::Span<float> grad, GradientSink* sink) {
  if (sink == nullptr) return absl::OkStatus();
  const ParamSpec& weight = params[2 * layer];
  const ParamSpec& bias = params[2 * layer + 1];
  const int64_t begin = weight.flat_offset;
  const int64_t end = bias.flat_offset + bias.num_elements;
  RETURN_IF_ERROR(backend->Download(grads + begin, (end - begin) * sizeof(float), grad.data() + begin));
  sink->GradientReady(2 * layer, 2 * layer + 2);
  return absl::OkStatus();
}

}  // namespace model
}  // namespace pstrain
