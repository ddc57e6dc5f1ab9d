#include "model/embedding_bag.h"

#include <limits>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace model {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// OK when offsets, indices and weights describe bags over num_rows rows (see AppendBagMatrices).
absl::Status CheckBags(absl::string_view what, absl::Span<const int64_t> offsets, absl::Span<const int32_t> indices,
                       absl::Span<const float> weights, int num_rows) {
  const int64_t keys = static_cast<int64_t>(indices.size());
  if (offsets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no offsets, expected one per sample plus one"));
  }
  if (static_cast<int64_t>(offsets.size()) - 1 > kMaxInt32 || keys > kMaxInt32) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", offsets.size() - 1, " samples and ", keys, " keys, at most ", kMaxInt32, " of each"));
  }
  if (offsets[0] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offsets start at ", offsets[0], ", expected 0"));
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": offsets decrease at sample ", i - 1, " (", offsets[i - 1], " then ", offsets[i], ")"));
    }
  }
  if (offsets.back() != keys) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": last offset is ", offsets.back(), ", expected the key count ", keys));
  }
  if (!weights.empty() && static_cast<int64_t>(weights.size()) != keys) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", weights.size(), " weights for ", keys, " keys, expected 0 or ", keys));
  }
  for (int64_t j = 0; j < keys; ++j) {
    if (indices[j] < 0 || indices[j] >= num_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": key ", j, " has row index ", indices[j], ", expected [0, ", num_rows, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BagMatrices> AppendBagMatrices(absl::string_view what, absl::Span<const int64_t> offsets,
                                              absl::Span<const int32_t> indices, absl::Span<const float> weights,
                                              int num_rows, BagPooling pooling, CsrPack* pack) {
  CHECK_GE(num_rows, 0);
  if (absl::Status status = CheckBags(what, offsets, indices, weights, num_rows); !status.ok()) {
    return status;
  }
  const int n = static_cast<int>(offsets.size()) - 1;
  BagMatrices result;
  result.forward = pack->Append(n, num_rows, static_cast<int64_t>(indices.size()));
  const absl::Span<int32_t> p_offsets = pack->offsets(result.forward);
  const absl::Span<int32_t> p_indices = pack->indices(result.forward);
  const absl::Span<float> p_values = pack->values(result.forward);
  for (int i = 0; i <= n; ++i) p_offsets[i] = static_cast<int32_t>(offsets[i]);
  for (int i = 0; i < n; ++i) {
    const int64_t begin = offsets[i], end = offsets[i + 1];
    const float mean_scale = 1.0f / static_cast<float>(end - begin);  // unused for an empty bag
    for (int64_t j = begin; j < end; ++j) {
      const float weight = weights.empty() ? 1.0f : weights[j];
      p_indices[j] = indices[j];
      p_values[j] = pooling == BagPooling::kMean ? weight * mean_scale : weight;
    }
  }
  result.backward = pack->AppendTranspose(result.forward);
  return result;
}

EmbeddingBag::EmbeddingBag(int dim) : dim_(dim) { CHECK_GT(dim_, 0); }

void EmbeddingBag::Forward(Backend* backend, const CsrMatrix& forward, const float* rows, float* out,
                           int out_stride) const {
  backend->CsrMatMul(forward, dim_, rows, dim_, /*accumulate=*/false, out, out_stride);
}

void EmbeddingBag::Backward(Backend* backend, const CsrMatrix& backward, const float* dout, int dout_stride,
                            bool accumulate, float* drows) const {
  backend->CsrMatMul(backward, dim_, dout, dout_stride, accumulate, drows, dim_);
}

}  // namespace model
}  // namespace pstrain
