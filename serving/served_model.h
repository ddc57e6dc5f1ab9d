// One version of a model as a serving process answers from it: a whole checkpoint cut (a model
// export, serving/model_export.h), indexed for lookups, immutable once made.
//
//   - Lookup(table, keys): each key's row, or its initial value when the table has no row for it
//     (never trained, or evicted), exactly as a parameter server reads it
//     (server/embedding_table.h EmbeddingInitialValue from the export's seed, table id and bound).
//   - Predict(records): model "ctr" only: each record's click probability, the forward pass of
//     the job's CtrModel on this version's dense tensors and rows; records are lines of the job's
//     data format (Criteo with or without the label; libsvm).
//
// A serving process swaps whole versions in (serving/model_slot.h), so an answer never mixes two
// cuts.
//
// Thread safety: Lookup and every accessor are safe from any thread. Predict serializes on one
// model per version (the CtrModel keeps scratch buffers).
#ifndef PSTRAIN_SERVING_SERVED_MODEL_H_
#define PSTRAIN_SERVING_SERVED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "data/ctr_files.h"
#include "serving/model_export.h"

namespace pstrain::model {
class Backend;
class CtrModel;
}  // namespace pstrain::model

namespace pstrain::serving {

class ServedModel {
 public:
  // Indexes `e`. For model "ctr" it also builds the CtrModel that Predict runs (INVALID_ARGUMENT
  // when the export's dense tensors or tables are not the job's CTR model's). DATA_LOSS for an
  // export whose sizes disagree with its manifest.
  static absl::StatusOr<std::unique_ptr<const ServedModel>> Create(ModelExport e, absl::Time loaded_at);
  ~ServedModel();

  int64_t step() const { return manifest_.step(); }
  const ExportManifest& manifest() const { return manifest_; }
  absl::Time loaded_at() const { return loaded_at_; }
  int64_t dense_values() const { return static_cast<int64_t>(dense_.values.size()); }
  const model::ModelFile& dense() const { return dense_; }
  // The table's dim and rows; INVALID_ARGUMENT for an unknown table, naming the model's tables.
  absl::StatusOr<int32_t> TableDim(absl::string_view table) const;
  int64_t TableRows(int t) const;

  // Writes keys.size() x dim values into `values` (row k for keys[k]) and whether each key has a
  // row into `found` (resized). INVALID_ARGUMENT for an unknown table or `values` of another size.
  absl::Status Lookup(absl::string_view table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                      std::vector<bool>* found) const;

  // The click probability of each record. FAILED_PRECONDITION for a model other than "ctr";
  // INVALID_ARGUMENT for a record that does not parse ("record 3: ..."), naming what was expected.
  absl::StatusOr<std::vector<float>> Predict(absl::Span<const std::string> records) const;

 private:
  struct Table {
    ExportedTable info;
    absl::flat_hash_map<uint64_t, uint32_t> index;  // key -> row
    std::vector<float> values;                      // rows x dim
  };

  ServedModel() = default;
  absl::StatusOr<int> FindTable(absl::string_view name) const;
  void Read(const Table& table, absl::Span<const uint64_t> keys, absl::Span<float> values,
            std::vector<bool>* found) const;

  ExportManifest manifest_;
  absl::Time loaded_at_;
  model::ModelFile dense_;
  std::vector<Table> tables_;
  absl::flat_hash_map<std::string, int> table_by_name_;

  // Model "ctr": the forward pass, one call at a time.
  data::DataFormat format_ = data::DataFormat::kCriteo;
  mutable absl::Mutex predict_mu_;
  std::unique_ptr<model::Backend> backend_;
  std::unique_ptr<model::CtrModel> ctr_ ABSL_GUARDED_BY(predict_mu_);
};

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_SERVED_MODEL_H_
