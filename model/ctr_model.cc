#include "model/ctr_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/init.h"
#include "model/mlp.h"

namespace pstrain {
namespace model {
namespace {

std::vector<int> LayerSizes(const CtrModelOptions& options) {
  std::vector<int> sizes = {options.num_dense + options.num_fields * options.dim};
  sizes.insert(sizes.end(), options.hidden_sizes.begin(), options.hidden_sizes.end());
  sizes.push_back(1);
  return sizes;
}

std::vector<std::string> TableNames(const std::vector<TableSpec>& tables) {
  std::vector<std::string> names;
  for (const TableSpec& table : tables) names.push_back(table.name);
  return names;
}

}  // namespace

absl::Status ValidateCtrModelOptions(const CtrModelOptions& options) {
  if (options.num_fields < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ctr model: num_fields is ", options.num_fields, ", expected >= 0"));
  }
  if (options.num_dense < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ctr model: num_dense is ", options.num_dense, ", expected >= 0"));
  }
  if (options.dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("ctr model: dim is ", options.dim, ", expected > 0"));
  }
  const int64_t width = options.num_dense + static_cast<int64_t>(options.num_fields) * options.dim;
  if (width == 0 || width > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ctr model: ", options.num_dense, " dense features + ", options.num_fields, " fields x dim ", options.dim,
        " make an input of ", width, " floats, expected [1, ", std::numeric_limits<int32_t>::max(), "]"));
  }
  for (size_t i = 0; i < options.hidden_sizes.size(); ++i) {
    if (options.hidden_sizes[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("ctr model hidden sizes [",
                                                     absl::StrJoin(options.hidden_sizes, ", "), "]: entry ", i, " is ",
                                                     options.hidden_sizes[i], ", expected > 0"));
    }
  }
  return absl::OkStatus();
}

std::vector<TableSpec> CtrTableSpecs(const CtrModelOptions& options) {
  std::vector<TableSpec> tables(options.num_fields);
  for (int f = 0; f < options.num_fields; ++f) {
    tables[f].name = absl::StrCat(options.table_prefix, f + 1);
    tables[f].dim = options.dim;
  }
  return tables;
}

std::vector<ParamSpec> CtrDenseParamSpecs(const CtrModelOptions& options) { return MlpParamSpecs(LayerSizes(options)); }

CtrModel::CtrModel(const CtrModelOptions& options, Backend* backend)
    : options_(options),
      tables_(CtrTableSpecs(options)),
      params_(CtrDenseParamSpecs(options)),
      num_parameters_(TotalElements(params_)),
      layer_sizes_(LayerSizes(options)),
      backend_(backend),
      bag_(options.dim),
      loss_(),
      index_(TableNames(tables_), options.num_dense, options.pooling),
      weights_(backend),
      grads_(backend),
      inputs_(backend),
      row_grads_(backend),
      matrices_(backend),
      delta_{BackendBuffer<float>(backend), BackendBuffer<float>(backend)},
      fm_dlogits_(backend) {
  for (size_t i = 0; i + 1 < layer_sizes_.size(); ++i) {
    linears_.emplace_back(layer_sizes_[i], layer_sizes_[i + 1]);
    if (i + 2 < layer_sizes_.size()) relus_.emplace_back(layer_sizes_[i + 1]);
  }
  for (size_t i = 0; i < layer_sizes_.size(); ++i) acts_.emplace_back(backend);
}

absl::StatusOr<std::unique_ptr<CtrModel>> CtrModel::Create(const CtrModelOptions& options, Backend* backend) {
  CHECK(backend != nullptr);
  RETURN_IF_ERROR(ValidateCtrModelOptions(options));
  std::unique_ptr<CtrModel> model(new CtrModel(options, backend));
  RETURN_IF_ERROR(model->weights_.Reserve(model->num_parameters_));
  RETURN_IF_ERROR(model->grads_.Reserve(model->num_parameters_));
  backend->Fill(model->num_parameters_, 0.0f, model->weights_.data());
  return model;
}

absl::Status CtrModel::SetParameters(absl::Span<const float> flat) {
  if (static_cast<int64_t>(flat.size()) != num_parameters_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ctr SetParameters: got ", flat.size(), " floats, expected ", num_parameters_));
  }
  return backend_->Upload(flat.data(), flat.size() * sizeof(float), weights_.data());
}

absl::Status CtrModel::GetParameters(absl::Span<float> flat) const {
  if (static_cast<int64_t>(flat.size()) != num_parameters_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ctr GetParameters: got room for ", flat.size(), " floats, expected ", num_parameters_));
  }
  return backend_->Download(weights_.data(), flat.size() * sizeof(float), flat.data());
}

absl::Status CtrModel::InitializeParameters(uint64_t seed) {
  std::vector<float> flat(num_parameters_);
  for (size_t t = 0; t < params_.size(); ++t) {
    const ParamSpec& spec = params_[t];
    FillInitialValues(seed, static_cast<int>(t), spec, 0, spec.num_elements, flat.data() + spec.flat_offset);
  }
  return SetParameters(flat);
}

absl::StatusOr<std::vector<absl::Span<const uint64_t>>> CtrModel::TableKeys(const data::CtrBatch& batch) {
  RETURN_IF_ERROR(index_.Index(batch));
  std::vector<absl::Span<const uint64_t>> keys;
  keys.reserve(tables_.size());
  for (int t = 0; t < index_.num_fields(); ++t) keys.push_back(index_.keys(t));
  return keys;
}

absl::Status CtrModel::CheckRows(const char* method, const data::CtrBatch& batch,
                                 absl::Span<const absl::Span<const float>> rows) const {
  if (!index_.Indexes(batch)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ctr ", method,
                     ": the batch is not the one the last TableKeys indexed; call TableKeys(batch) "
                     "first and keep the batch unchanged"));
  }
  if (rows.size() != tables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ctr ", method, ": ", rows.size(), " row buffers, expected ", tables_.size(), " (one per table)"));
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    const int64_t keys = index_.num_rows(static_cast<int>(t));
    if (static_cast<int64_t>(rows[t].size()) != keys * options_.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("ctr ", method, ": table ", t, " (", tables_[t].name, ") rows: got ", rows[t].size(),
                       " floats, expected ", keys * options_.dim, " (", keys, " keys x dim ", options_.dim, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CtrModel::ReserveRows(int n) {
  if (n <= reserved_rows_) return absl::OkStatus();
  const int max_width = *std::max_element(layer_sizes_.begin(), layer_sizes_.end());
  for (size_t i = 0; i < acts_.size(); ++i) {
    RETURN_IF_ERROR(acts_[i].Reserve(static_cast<int64_t>(n) * layer_sizes_[i]));
  }
  for (BackendBuffer<float>& d : delta_) {
    RETURN_IF_ERROR(d.Reserve(static_cast<int64_t>(n) * max_width));
  }
  if (fm()) RETURN_IF_ERROR(fm_dlogits_.Reserve(n));
  reserved_rows_ = n;
  return absl::OkStatus();
}

absl::Status CtrModel::Forward(const data::CtrBatch& batch, absl::Span<const absl::Span<const float>> rows) {
  const int n = static_cast<int>(batch.size);
  const int num_dense = options_.num_dense;
  const int width = input_width();
  RETURN_IF_ERROR(ReserveRows(n));

  // One upload for everything dense: a copy to a GPU costs a wait for the device, so the rows of
  // every table travel together.
  labels_at_ = static_cast<int64_t>(n) * num_dense;
  rows_at_ = labels_at_ + n;
  row_at_.assign(1, 0);
  for (const absl::Span<const float>& table_rows : rows) {
    row_at_.push_back(row_at_.back() + static_cast<int64_t>(table_rows.size()));
  }
  staging_.resize(rows_at_ + row_at_.back());
  std::copy(batch.dense.begin(), batch.dense.end(), staging_.begin());
  std::copy(batch.labels.begin(), batch.labels.end(), staging_.begin() + labels_at_);
  for (size_t t = 0; t < rows.size(); ++t) {
    std::copy(rows[t].begin(), rows[t].end(), staging_.begin() + rows_at_ + row_at_[t]);
  }
  RETURN_IF_ERROR(inputs_.Reserve(static_cast<int64_t>(staging_.size())));
  RETURN_IF_ERROR(backend_->Upload(staging_.data(), staging_.size() * sizeof(float), inputs_.data()));
  RETURN_IF_ERROR(matrices_.Upload(index_.matrices()));

  // The MLP's input, assembled in place: dense features, then each field's pooled bag.
  float* x = acts_[0].data();
  if (num_dense > 0) backend_->CopyMatrix(n, num_dense, inputs_.data(), num_dense, x, width);
  for (int f = 0; f < options_.num_fields; ++f) {
    bag_.Forward(backend_, matrices_.matrix(index_.bag(f).forward), inputs_.data() + rows_at_ + row_at_[f],
                 x + num_dense + f * options_.dim, width);
  }
  for (size_t i = 0; i < linears_.size(); ++i) {
    float* y = acts_[i + 1].data();
    linears_[i].Forward(backend_, n, acts_[i].data(), weight(2 * i), weight(2 * i + 1), y);
    if (i < relus_.size()) relus_[i].Forward(backend_, n, y, y);  // in place: backward needs y
  }
  if (fm()) {
    backend_->PairwiseDotsForward(n, options_.num_fields, options_.dim, x + num_dense, width, acts_.back().data());
  }
  return absl::OkStatus();
}

void CtrModel::Backward(int n) {
  float* dy = delta_[0].data();  // starts as dlogits()
  float* dx = delta_[1].data();
  // The MLP's backward pass reuses dlogits()' buffer; the FM term needs it after.
  if (fm()) backend_->CopyMatrix(n, 1, dlogits(), 1, fm_dlogits_.data(), 1);
  for (int i = static_cast<int>(linears_.size()) - 1; i >= 0; --i) {
    // The first layer's input gradient is only needed for the embedding rows.
    const bool want_dx = i > 0 || options_.num_fields > 0;
    linears_[i].Backward(backend_, n, acts_[i].data(), weight(2 * i), dy, grad(2 * i), grad(2 * i + 1),
                         want_dx ? dx : nullptr);
    if (i > 0) relus_[i - 1].Backward(backend_, n, acts_[i].data(), dx, dx);
    std::swap(dy, dx);
  }
  // dy = d(mean loss)/d(input rows), n x input_width(); the dense features' columns go unused.
  if (fm()) {
    const int width = input_width();
    backend_->PairwiseDotsBackward(n, options_.num_fields, options_.dim, acts_[0].data() + options_.num_dense, width,
                                   fm_dlogits_.data(), dy + options_.num_dense, width);
  }
  for (int f = 0; f < options_.num_fields; ++f) {
    bag_.Backward(backend_, matrices_.matrix(index_.bag(f).backward), dy + options_.num_dense + f * options_.dim,
                  input_width(), /*accumulate=*/false, row_grads_.data() + row_at_[f]);
  }
}

absl::Status CtrModel::ComputeGradient(const data::CtrBatch& batch, absl::Span<const absl::Span<const float>> rows,
                                       absl::Span<float> dense_grad, absl::Span<const absl::Span<float>> row_grads,
                                       BatchStats* stats) {
  RETURN_IF_ERROR(CheckRows("ComputeGradient", batch, rows));
  if (static_cast<int64_t>(dense_grad.size()) != num_parameters_) {
    return absl::InvalidArgumentError(absl::StrCat("ctr ComputeGradient: dense gradient has room for ",
                                                   dense_grad.size(), " floats, expected ", num_parameters_));
  }
  if (row_grads.size() != tables_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ctr ComputeGradient: ", row_grads.size(),
                                                   " row gradient buffers, expected ", tables_.size(),
                                                   " (one per table)"));
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (row_grads[t].size() != rows[t].size()) {
      return absl::InvalidArgumentError(absl::StrCat("ctr ComputeGradient: table ", t, " (", tables_[t].name,
                                                     ") row gradient has room for ", row_grads[t].size(),
                                                     " floats, expected ", rows[t].size(), " (as many as its rows)"));
    }
  }
  const int n = static_cast<int>(batch.size);
  if (n == 0) {  // no keys either, so every row gradient is empty
    std::fill(dense_grad.begin(), dense_grad.end(), 0.0f);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Forward(batch, rows));
  RETURN_IF_ERROR(row_grads_.Reserve(row_at_.back()));
  // d(mean loss)/d(logit) = (p - y) / n, so every gradient below is one of the mean loss.
  const XentResult xent =
      loss_.ForwardBackward(backend_, n, logits(), labels(), 1.0f / static_cast<float>(n), dlogits());
  Backward(n);
  RETURN_IF_ERROR(backend_->Download(grads_.data(), dense_grad.size() * sizeof(float), dense_grad.data()));
  staging_.resize(row_at_.back());
  RETURN_IF_ERROR(backend_->Download(row_grads_.data(), staging_.size() * sizeof(float), staging_.data()));
  for (size_t t = 0; t < row_grads.size(); ++t) {
    std::copy(staging_.begin() + row_at_[t], staging_.begin() + row_at_[t + 1], row_grads[t].begin());
  }
  if (stats != nullptr) {
    stats->loss_sum += xent.loss_sum;
    stats->correct += xent.correct;
    stats->samples += n;
    if (stats->want_predictions) {
      // The logits of the forward pass above, unchanged by the backward pass.
      const size_t at = stats->predictions.size();
      stats->predictions.resize(at + n);
      RETURN_IF_ERROR(backend_->Download(logits(), n * sizeof(float), stats->predictions.data() + at));
      for (int i = 0; i < n; ++i) {
        float& p = stats->predictions[at + i];
        p = 1.0f / (1.0f + std::exp(-p));
        stats->labels.push_back(batch.labels[i] > 0.5f ? 1 : 0);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CtrModel::Predict(const data::CtrBatch& batch, absl::Span<const absl::Span<const float>> rows,
                               absl::Span<float> probabilities) {
  RETURN_IF_ERROR(CheckRows("Predict", batch, rows));
  if (static_cast<int64_t>(probabilities.size()) != batch.size) {
    return absl::InvalidArgumentError(absl::StrCat("ctr Predict: room for ", probabilities.size(),
                                                   " probabilities, expected ", batch.size, " (one per sample)"));
  }
  const int n = static_cast<int>(batch.size);
  if (n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Forward(batch, rows));
  loss_.Probabilities(backend_, n, logits(), dlogits());
  return backend_->Download(dlogits(), probabilities.size() * sizeof(float), probabilities.data());
}

}  // namespace model
}  // namespace pstrain
