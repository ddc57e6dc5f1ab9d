// What a CTR training step works out on the host before it can pull a single row: the batch
// checked against the model's shape, each field's keys indexed into its table's pull list
// (model/key_index.h), and the pooling matrices of every field's bags (model/embedding_bag.h),
// packed for one upload. One table per field: table f holds field f's keys.
//
//   Index(batch) --> keys(f): what to pull for table f (sorted, distinct)
//                --> matrices(), bag(f): P and P^T of field f, over keys(f).size() rows
//
// The CTR model (model/ctr_model.h) owns one and refills it in TableKeys; ComputeGradient and
// Predict then read it for the same batch.
//
// Thread safety: not thread-safe.
#ifndef PSTRAIN_MODEL_CTR_BATCH_INDEX_H_
#define PSTRAIN_MODEL_CTR_BATCH_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "data/ctr_batch.h"
#include "model/csr_pack.h"
#include "model/embedding_bag.h"
#include "model/key_index.h"

namespace pstrain {
namespace model {

class CtrBatchIndex {
 public:
  // A batch must have field_names.size() categorical fields (the names appear in error messages)
  // and num_dense dense features per sample; bags pool with `pooling`. REQUIRES: num_dense >= 0.
  CtrBatchIndex(std::vector<std::string> field_names, int num_dense, BagPooling pooling);

  // Checks `batch` and indexes it. INVALID_ARGUMENT, naming the field or sample and what was
  // expected, when the batch has another field count or dense width, lists of the wrong length, a
  // label outside [0, 1], a dense feature that is not finite, or bags that AppendBagMatrices
  // refuses ("ctr batch field 3 (C4): offsets decrease at sample 7 (15 then 12)"). On error
  // nothing is indexed: Indexes() is false for every batch.
  absl::Status Index(const data::CtrBatch& batch);

  // Whether `batch` is the batch of the last successful Index: the same object, with the same
  // size and key counts. A guard against mixing up batches, not a proof: a batch refilled in place
  // with the same sizes passes.
  bool Indexes(const data::CtrBatch& batch) const;

  int num_fields() const { return static_cast<int>(field_names_.size()); }
  const std::string& field_name(int field) const { return field_names_[field]; }

  // After a successful Index, until the next one. keys(f): table f's distinct keys, ascending
  // (row k of its pull belongs to keys(f)[k]); bag(f): field f's matrices in matrices().
  absl::Span<const uint64_t> keys(int field) const { return tables_[field].unique_keys(); }
  int num_rows(int field) const { return static_cast<int>(keys(field).size()); }
  const CsrPack& matrices() const { return matrices_; }
  const BagMatrices& bag(int field) const { return bags_[field]; }

 private:
  absl::Status CheckShape(const data::CtrBatch& batch) const;
  absl::Status IndexFields(const data::CtrBatch& batch);

  // Constant after construction.
  const std::vector<std::string> field_names_;
  const int num_dense_;
  const BagPooling pooling_;

  std::vector<KeyIndex> tables_;  // one per field
  CsrPack matrices_;
  std::vector<BagMatrices> bags_;
  // Which batch is indexed (null: none), for Indexes(): compared, never dereferenced.
  const data::CtrBatch* batch_ = nullptr;
  int64_t size_ = 0;
  std::vector<int64_t> key_counts_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CTR_BATCH_INDEX_H_
