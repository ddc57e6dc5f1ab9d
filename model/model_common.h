// The parts of a model that do not depend on its architecture, shared by Mlp and Cnn: moving the
// flat parameter vector in and out of backend memory, its initial values, and the checks of a
// batch. Each error names the model ("mlp", "cnn") as the caller passes it.
//
// Thread safety: free functions; the Backend passed in is not thread-safe.
#ifndef PSTRAIN_MODEL_MODEL_COMMON_H_
#define PSTRAIN_MODEL_MODEL_COMMON_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/backend.h"
#include "model/param_spec.h"

namespace pstrain {
namespace model {

class GradientSink;  // model/model.h

// Uploads `flat` (host) into `weights` (backend memory of `expected` floats). INVALID_ARGUMENT
// "<model> SetParameters: got N floats, expected M" for a wrong size.
absl::Status UploadParameters(absl::string_view model, Backend* backend, absl::Span<const float> flat,
                              int64_t expected, float* weights);

// Downloads `weights` (backend memory of `expected` floats) into `flat` (host). INVALID_ARGUMENT
// "<model> GetParameters: got room for N floats, expected M" for a wrong size.
absl::Status DownloadParameters(absl::string_view model, Backend* backend, const float* weights, int64_t expected,
                                absl::Span<float> flat);

// Backward of a model whose layers each own the tensor pair (2 * layer, 2 * layer + 1), weight and
// bias: after layer `layer`'s backward, downloads that pair's gradients from `grads` (backend
// memory, flat layout of `params`) into `grad` (host) and tells `sink`. Without a sink it does
// nothing: the caller downloads the whole gradient at the end, in one copy.
absl::Status ReportLayerGradient(Backend* backend, const std::vector<ParamSpec>& params, int layer,
                                 const float* grads, absl::Span<float> grad, GradientSink* sink);

// Every tensor's model/init.h initial values for `seed`, in the flat layout of `params`.
std::vector<float> InitialParameters(uint64_t seed, const std::vector<ParamSpec>& params);

// OK for a batch of n >= 0 samples with non-null inputs (when n > 0) and every label in
// [0, classes); otherwise INVALID_ARGUMENT naming the first bad sample and its label.
absl::Status CheckBatch(absl::string_view model, const float* x, const int32_t* labels, int n, int classes);

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_MODEL_COMMON_H_
