#include "serving/served_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/ctr_model_options.h"
#include "common/status_macros.h"
#include "common/table_spec.h"
#include "data/criteo_reader.h"
#include "data/ctr_batch.h"
#include "data/ctr_source.h"
#include "data/libsvm_reader.h"
#include "model/cpu_backend.h"
#include "model/ctr_model.h"
#include "server/embedding_table.h"

namespace pstrain::serving {
namespace {

// Criteo lines with the label have 40 fields, without it 39.
bool CriteoHasLabel(absl::string_view line) {
  int tabs = 0;
  for (char c : line) tabs += c == '\t';
  return tabs != data::kCriteoDense + data::kCriteoCategorical - 1;
}

// `records` as one batch of `format`, as CtrSource builds one; labels are read and dropped (set to 0).
absl::StatusOr<data::CtrBatch> ParseRecords(data::DataFormat format, absl::Span<const std::string> records) {
  data::CtrBatch batch;
  data::ClearCtrBatch(format, &batch);
  data::CtrSample criteo;
  data::LibsvmSample libsvm;
  for (size_t i = 0; i < records.size(); ++i) {
    const absl::string_view line = records[i];
    if (format == data::DataFormat::kCriteo) {
      if (absl::Status s = data::ParseCriteoLine(line, CriteoHasLabel(line), &criteo); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("record ", i, ": ", s.message()));
      }
      data::AppendCriteoSample(criteo, &batch);
    } else {
      absl::StatusOr<bool> parsed = data::ParseLibsvmLine(line, &libsvm);
      if (!parsed.ok() || !*parsed) {
        return absl::InvalidArgumentError(
            absl::StrCat("record ", i, ": ",
                         parsed.ok() ? "empty or a comment, expected a libsvm record" : parsed.status().message()));
      }
      data::AppendLibsvmSample(libsvm, &batch);
    }
  }
  // Predict reads no label.
  std::fill(batch.labels.begin(), batch.labels.end(), 0.0f);
  return batch;
}

}  // namespace

ServedModel::~ServedModel() = default;

absl::StatusOr<std::unique_ptr<const ServedModel>> ServedModel::Create(ModelExport e, absl::Time loaded_at) {
  auto m = std::unique_ptr<ServedModel>(new ServedModel());
  m->manifest_ = std::move(e.manifest);
  m->loaded_at_ = loaded_at;
  m->dense_ = std::move(e.dense);
  if (e.tables.size() != static_cast<size_t>(m->manifest_.tables_size())) {
    return absl::DataLossError(absl::StrCat("export of step ", m->manifest_.step(), ": ", e.tables.size(),
                                            " tables of rows, the manifest describes ", m->manifest_.tables_size()));
  }
  for (int t = 0; t < m->manifest_.tables_size(); ++t) {
    Table table;
    table.info = m->manifest_.tables(t);
    serving::TableRows& rows = e.tables[t];
    if (rows.values.size() != rows.keys.size() * static_cast<size_t>(table.info.dim())) {
      return absl::DataLossError(absl::StrCat("export of step ", m->manifest_.step(), ": table '", table.info.name(),
                                              "' has ", rows.keys.size(), " keys and ", rows.values.size(),
                                              " values, expected ", table.info.dim(), " a key"));
    }
    table.index.reserve(rows.keys.size());
    for (size_t i = 0; i < rows.keys.size(); ++i) table.index.emplace(rows.keys[i], static_cast<uint32_t>(i));
    table.values = std::move(rows.values);
    m->table_by_name_.emplace(table.info.name(), t);
    m->tables_.push_back(std::move(table));
  }
  const JobSpec& job = m->manifest_.job();
  if (job.model() == kCtrModel) {
    ASSIGN_OR_RETURN(m->format_, data::ParseDataFormat(job.data().format()));
    const model::CtrModelOptions options = CtrModelOptionsOf(job);
    m->backend_ = model::NewCpuBackend();
    absl::MutexLock lock(&m->predict_mu_);
    ASSIGN_OR_RETURN(m->ctr_, model::CtrModel::Create(options, m->backend_.get()));
    if (m->ctr_->tables().size() != m->tables_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("export of step ", m->manifest_.step(), ": the CTR model has ",
                                                     m->ctr_->tables().size(), " tables, the export ",
                                                     m->tables_.size()));
    }
    for (size_t t = 0; t < m->tables_.size(); ++t) {
      const model::TableSpec& wanted = m->ctr_->tables()[t];
      if (wanted.name != m->tables_[t].info.name() || wanted.dim != m->tables_[t].info.dim()) {
        return absl::InvalidArgumentError(absl::StrCat("export of step ", m->manifest_.step(), ": table ", t, " is '",
                                                       m->tables_[t].info.name(), "' of dim ", m->tables_[t].info.dim(),
                                                       ", the CTR model's '", wanted.name, "' of dim ", wanted.dim));
      }
    }
    RETURN_IF_ERROR(m->ctr_->SetParameters(m->dense_.values));
  }
  return std::unique_ptr<const ServedModel>(std::move(m));
}

absl::StatusOr<int> ServedModel::FindTable(absl::string_view name) const {
  const auto it = table_by_name_.find(name);
  if (it != table_by_name_.end()) return it->second;
  std::vector<std::string> names;
  for (const Table& t : tables_) names.push_back(t.info.name());
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown table '", name, "'; the model's tables: ", names.empty() ? "none" : absl::StrJoin(names, ", ")));
}

absl::StatusOr<int32_t> ServedModel::TableDim(absl::string_view table) const {
  ASSIGN_OR_RETURN(const int t, FindTable(table));
  return tables_[t].info.dim();
}

int64_t ServedModel::TableRows(int t) const { return static_cast<int64_t>(tables_[t].index.size()); }

void ServedModel::Read(const Table& table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                       std::vector<bool>* found) const {
  const int dim = table.info.dim();
  if (found != nullptr) found->assign(keys.size(), false);
  for (size_t k = 0; k < keys.size(); ++k) {
    float* out = values.data() + k * dim;
    const auto it = table.index.find(keys[k]);
    if (it != table.index.end()) {
      const float* row = table.values.data() + static_cast<size_t>(it->second) * dim;
      std::copy(row, row + dim, out);
      if (found != nullptr) (*found)[k] = true;
      continue;
    }
    for (int j = 0; j < dim; ++j) {
      out[j] = server::EmbeddingInitialValue(table.info.seed(), table.info.id(), keys[k], j, table.info.init_bound());
    }
  }
}

absl::Status ServedModel::Lookup(absl::string_view table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                                 std::vector<bool>* found) const {
  ASSIGN_OR_RETURN(const int t, FindTable(table));
  const size_t dim = static_cast<size_t>(tables_[t].info.dim());
  if (values.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat("lookup in table '", table, "': room for ", values.size(),
                                                   " values, expected ", keys.size(), " keys x ", dim));
  }
  Read(tables_[t], keys, values, found);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ServedModel::Predict(absl::Span<const std::string> records) const {
  if (backend_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("Predict serves model \"ctr\" only; this job's model is \"",
                                                      manifest_.job().model(), "\": use Lookup, or the dense tensors"));
  }
  ASSIGN_OR_RETURN(const data::CtrBatch batch, ParseRecords(format_, records));
  absl::MutexLock lock(&predict_mu_);
  ASSIGN_OR_RETURN(const std::vector<absl::Span<const uint64_t>> keys, ctr_->TableKeys(batch));
  std::vector<std::vector<float>> rows(keys.size());
  std::vector<absl::Span<const float>> spans;
  for (size_t t = 0; t < keys.size(); ++t) {
    rows[t].resize(keys[t].size() * static_cast<size_t>(tables_[t].info.dim()));
    Read(tables_[t], keys[t], absl::MakeSpan(rows[t]), nullptr);
    spans.emplace_back(rows[t]);
  }
  std::vector<float> probabilities(static_cast<size_t>(batch.size));
  RETURN_IF_ERROR(ctr_->Predict(batch, spans, absl::MakeSpan(probabilities)));
  return probabilities;
}

}  // namespace pstrain::serving
