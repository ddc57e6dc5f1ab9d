#include "model/csr_pack.h"

#include <limits>
#include <utility>

#include <glog/logging.h>

#include "common/status_macros.h"

namespace pstrain {
namespace model {

void CsrPack::Clear() {
  layouts_.clear();
  ints_.clear();
  floats_.clear();
}

int CsrPack::Append(int rows, int cols, int64_t nnz) {
  CHECK_GE(rows, 0);
  CHECK_GE(cols, 0);
  CHECK_GE(nnz, 0);
  CHECK_LE(nnz, std::numeric_limits<int32_t>::max());
  Layout layout;
  layout.rows = rows;
  layout.cols = cols;
  layout.nnz = nnz;
  layout.offsets_at = static_cast<int64_t>(ints_.size());
  layout.indices_at = layout.offsets_at + rows + 1;
  layout.values_at = static_cast<int64_t>(floats_.size());
  ints_.resize(layout.indices_at + nnz, 0);
  floats_.resize(layout.values_at + nnz, 0.0f);
  layouts_.push_back(layout);
  return size() - 1;
}

int CsrPack::AppendTranspose(int m) {
  const Layout from = layouts_[m];
  const int t = Append(from.cols, from.rows, from.nnz);
  // Counting sort by column. Append may have moved the arrays: take every span after it.
  const absl::Span<const int32_t> offsets = std::as_const(*this).offsets(m);
  const absl::Span<const int32_t> indices = std::as_const(*this).indices(m);
  const absl::Span<const float> values = std::as_const(*this).values(m);
  const absl::Span<int32_t> t_offsets = this->offsets(t);
  const absl::Span<int32_t> t_indices = this->indices(t);
  const absl::Span<float> t_values = this->values(t);
  for (int64_t j = 0; j < from.nnz; ++j) ++t_offsets[indices[j] + 1];
  for (int c = 0; c < from.cols; ++c) t_offsets[c + 1] += t_offsets[c];
  fill_.assign(t_offsets.begin(), t_offsets.end() - 1);
  for (int r = 0; r < from.rows; ++r) {
    for (int32_t j = offsets[r]; j < offsets[r + 1]; ++j) {
      const int32_t slot = fill_[indices[j]]++;
      t_indices[slot] = r;
      t_values[slot] = values[j];
    }
  }
  return t;
}

absl::Span<int32_t> CsrPack::offsets(int m) {
  return absl::MakeSpan(ints_).subspan(layouts_[m].offsets_at, layouts_[m].rows + 1);
}
absl::Span<int32_t> CsrPack::indices(int m) {
  return absl::MakeSpan(ints_).subspan(layouts_[m].indices_at, layouts_[m].nnz);
}
absl::Span<float> CsrPack::values(int m) {
  return absl::MakeSpan(floats_).subspan(layouts_[m].values_at, layouts_[m].nnz);
}
absl::Span<const int32_t> CsrPack::offsets(int m) const {
  return absl::MakeConstSpan(ints_).subspan(layouts_[m].offsets_at, layouts_[m].rows + 1);
}
absl::Span<const int32_t> CsrPack::indices(int m) const {
  return absl::MakeConstSpan(ints_).subspan(layouts_[m].indices_at, layouts_[m].nnz);
}
absl::Span<const float> CsrPack::values(int m) const {
  return absl::MakeConstSpan(floats_).subspan(layouts_[m].values_at, layouts_[m].nnz);
}

BackendCsrPack::BackendCsrPack(Backend* backend) : backend_(backend), ints_(backend), floats_(backend) {
  CHECK(backend != nullptr);
}

absl::Status BackendCsrPack::Upload(const CsrPack& pack) {
  layouts_.clear();
  const absl::Span<const int32_t> ints = pack.ints();
  const absl::Span<const float> floats = pack.floats();
  RETURN_IF_ERROR(ints_.Reserve(static_cast<int64_t>(ints.size())));
  RETURN_IF_ERROR(floats_.Reserve(static_cast<int64_t>(floats.size())));
  RETURN_IF_ERROR(backend_->Upload(ints.data(), ints.size() * sizeof(int32_t), ints_.data()));
  RETURN_IF_ERROR(backend_->Upload(floats.data(), floats.size() * sizeof(float), floats_.data()));
  for (int m = 0; m < pack.size(); ++m) layouts_.push_back(pack.layout(m));
  return absl::OkStatus();
}

CsrMatrix BackendCsrPack::matrix(int m) const {
  CHECK_GE(m, 0);
  CHECK_LT(m, size());
  const CsrPack::Layout& layout = layouts_[m];
  CsrMatrix matrix;
  matrix.rows = layout.rows;
  matrix.cols = layout.cols;
  matrix.offsets = ints_.data() + layout.offsets_at;
  matrix.indices = ints_.data() + layout.indices_at;
  matrix.values = floats_.data() + layout.values_at;
  return matrix;
}

}  // namespace model
}  // namespace pstrain
