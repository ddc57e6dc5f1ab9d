// Embedding bags: each sample's bag of keys becomes one vector, the sum or the mean of the
// embedding rows of its keys, optionally weighted per key (DLRM, Wide&Deep, a libsvm line's
// feature values).
//
// The rows are what a worker pulled for one table: a U x dim matrix whose row k belongs to the
// k-th distinct key of the batch (model/key_index.h). Pooling n bags is a product with a sparse
// n x U matrix P, P[i][k] = the sum of the scales of sample i's occurrences of key k:
//
//   forward    out   = P   * rows     n x dim
//   backward   drows = P^T * dout     U x dim   (a key repeated in one bag or across bags sums)
//
// AppendBagMatrices builds P and P^T on the host into a CsrPack (model/csr_pack.h), one pack per
// batch, uploaded in two copies; EmbeddingBag runs both products with Backend::CsrMatMul. Backward
// is a gather per row through P^T, not a scatter: deterministic, and the same bits on every
// backend. The output is a column block of a wider row-major matrix (a row stride), so the bags of
// several fields and the dense features concatenate in place, as the input of the next layer.
//
// Thread safety: AppendBagMatrices is a pure function of its arguments (and *pack); EmbeddingBag
// has const methods only, but the Backend passed in is not thread-safe.
#ifndef PSTRAIN_MODEL_EMBEDDING_BAG_H_
#define PSTRAIN_MODEL_EMBEDDING_BAG_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/backend.h"
#include "model/csr_pack.h"
#include "model/key_index.h"

namespace pstrain {
namespace model {

// How a bag's rows combine. Each key occurrence j contributes scale_j * row, with
//   kSum:  scale_j = w_j
//   kMean: scale_j = w_j / (number of keys in the bag)
// where w_j is the key's weight (1 without weights). kMean divides by the key count, not by the
// weight sum, so weights mean the same under both; an empty bag gives zeros under both.
enum class BagPooling { kSum, kMean };

// The numbers of a bag's two matrices in its CsrPack.
struct BagMatrices {
  int forward = -1;   // P:   n x num_rows
  int backward = -1;  // P^T: num_rows x n, entries of a row in ascending sample order
};

// Appends P and P^T of n = offsets.size() - 1 bags to *pack. Sample i's bag is the key occurrences
// [offsets[i], offsets[i + 1]); indices[j] is occurrence j's row in [0, num_rows) (KeyIndex's
// indices); weights is empty (all 1) or one per occurrence. INVALID_ARGUMENT, the message starting
// with `what` (say "field 3 (C4)"), when offsets are empty, do not start at 0, decrease, or do not
// end at indices.size(); when weights has another size; when an index is out of range; or when
// there are more than INT32_MAX samples or occurrences. *pack is unchanged on error.
// REQUIRES: num_rows >= 0.
absl::StatusOr<BagMatrices> AppendBagMatrices(absl::string_view what, absl::Span<const int64_t> offsets,
                                              absl::Span<const int32_t> indices, absl::Span<const float> weights,
                                              int num_rows, BagPooling pooling, CsrPack* pack);

// The layer: pooled bags forward, row gradients backward, for rows of `dim` floats. It holds only
// its width; matrices, rows and outputs are backend memory owned by the caller.
class EmbeddingBag {
 public:
  // REQUIRES: dim > 0.
  explicit EmbeddingBag(int dim);

  int dim() const { return dim_; }

  // out[i][0, dim) = row i of P * rows for the forward.rows bags, rows being forward.cols x dim.
  // Consecutive output rows are out_stride floats apart (>= dim), so out may point at a column
  // block of a wider matrix. Overwrites out.
  void Forward(Backend* backend, const CsrMatrix& forward, const float* rows, float* out, int out_stride) const;

  // drows (backward.rows x dim) = P^T * dout, or += with accumulate, where dout holds the
  // gradient of the bags' outputs (backward.cols rows, dout_stride floats apart). Fields that share
  // a table add into one gradient: the first overwrites, the others accumulate.
  void Backward(Backend* backend, const CsrMatrix& backward, const float* dout, int dout_stride, bool accumulate,
                float* drows) const;

 private:
  int dim_;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_EMBEDDING_BAG_H_
