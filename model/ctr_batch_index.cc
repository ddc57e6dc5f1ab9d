#include "model/ctr_batch_index.h"

#include <cmath>
#include <limits>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace model {

CtrBatchIndex::CtrBatchIndex(std::vector<std::string> field_names, int num_dense, BagPooling pooling)
    : field_names_(std::move(field_names)),
      num_dense_(num_dense),
      pooling_(pooling),
      tables_(field_names_.size()),
      bags_(field_names_.size()),
      key_counts_(field_names_.size()) {
  CHECK_GE(num_dense_, 0);
}

absl::Status CtrBatchIndex::CheckShape(const data::CtrBatch& batch) const {
  const int64_t n = batch.size;
  if (n < 0 || n > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ctr batch: size ", n, ", expected [0, ", std::numeric_limits<int32_t>::max(), "]"));
  }
  if (batch.num_fields() != num_fields()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ctr batch: ", batch.num_fields(), " categorical fields, expected ", num_fields()));
  }
  if (batch.offsets.size() != batch.keys.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ctr batch: ", batch.offsets.size(), " offset lists for ",
                                                   batch.keys.size(), " fields, expected one per field"));
  }
  if (!batch.weights.empty() && batch.weights.size() != batch.keys.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ctr batch: ", batch.weights.size(), " weight lists for ",
                                                   batch.keys.size(), " fields, expected none or one per field"));
  }
  if (batch.num_dense != num_dense_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ctr batch: ", batch.num_dense, " dense features per sample, expected ", num_dense_));
  }
  if (static_cast<int64_t>(batch.labels.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("ctr batch of ", n, " samples: ", batch.labels.size(), " labels, expected ", n));
  }
  if (static_cast<int64_t>(batch.dense.size()) != n * num_dense_) {
    return absl::InvalidArgumentError(absl::StrCat("ctr batch of ", n, " samples: ", batch.dense.size(),
                                                   " dense floats, expected ", n * num_dense_, " (", n, " x ",
                                                   num_dense_, ")"));
  }
  for (int64_t i = 0; i < n; ++i) {
    const float y = batch.labels[i];
    if (!(y >= 0.0f && y <= 1.0f)) {  // also refuses NaN
      return absl::InvalidArgumentError(
          absl::StrCat("ctr batch: sample ", i, " has label ", y, ", expected a value in [0, 1]"));
    }
  }
  for (int64_t j = 0; j < n * num_dense_; ++j) {
    if (!std::isfinite(batch.dense[j])) {
      return absl::InvalidArgumentError(absl::StrCat("ctr batch: sample ", j / num_dense_, " dense feature ",
                                                     j % num_dense_, " is ", batch.dense[j],
                                                     ", expected a finite value"));
    }
  }
  for (int f = 0; f < num_fields(); ++f) {
    if (static_cast<int64_t>(batch.offsets[f].size()) != n + 1) {
      return absl::InvalidArgumentError(absl::StrCat("ctr batch field ", f, " (", field_names_[f],
                                                     "): ", batch.offsets[f].size(), " offsets, expected ", n + 1,
                                                     " (samples + 1)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CtrBatchIndex::IndexFields(const data::CtrBatch& batch) {
  matrices_.Clear();
  for (int f = 0; f < num_fields(); ++f) {
    const std::string what = absl::StrCat("ctr batch field ", f, " (", field_names_[f], ")");
    KeyIndex& table = tables_[f];
    table.Clear();
    const int part = table.Add(batch.keys[f]);
    if (absl::Status status = table.Build(); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", status.message()));
    }
    const absl::Span<const float> weights =
        batch.weights.empty() ? absl::Span<const float>() : absl::MakeConstSpan(batch.weights[f]);
    ASSIGN_OR_RETURN(bags_[f], AppendBagMatrices(what, batch.offsets[f], table.indices(part), weights,
                                                 static_cast<int>(table.unique_keys().size()), pooling_, &matrices_));
    key_counts_[f] = static_cast<int64_t>(batch.keys[f].size());
  }
  return absl::OkStatus();
}

absl::Status CtrBatchIndex::Index(const data::CtrBatch& batch) {
  batch_ = nullptr;
  RETURN_IF_ERROR(CheckShape(batch));
  RETURN_IF_ERROR(IndexFields(batch));
  batch_ = &batch;
  size_ = batch.size;
  return absl::OkStatus();
}

bool CtrBatchIndex::Indexes(const data::CtrBatch& batch) const {
  if (batch_ != &batch || size_ != batch.size || batch.num_fields() != num_fields()) return false;
  for (int f = 0; f < num_fields(); ++f) {
    if (static_cast<int64_t>(batch.keys[f].size()) != key_counts_[f]) return false;
  }
  return true;
}

}  // namespace model
}  // namespace pstrain
