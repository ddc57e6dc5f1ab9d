// A click-through-rate model in the DLRM / Wide&Deep style: one embedding table per categorical
// field, each sample's bag pooled per field, concatenated with the dense features, then an MLP
// (Linear -> ReLU -> ... -> Linear) to one logit, trained with binary cross-entropy.
//
//   input row (input_width() floats) = [dense (num_dense) | pool(C1) (dim) | ... | pool(CF) (dim)]
//   logit = MLP(input row) [+ sum_{f<g} <pool(f), pool(g)> with interaction kFm: DeepFM]
//   p = sigmoid(logit);  loss = log loss(p, label)
//
// Two kinds of parameters, both held by the parameter servers:
//   - embedding rows, per table, keyed by uint64. Each step the worker asks TableKeys which keys a
//     batch touches, pulls exactly those rows (U x dim floats per table, row k for the k-th key),
//     and gets back from ComputeGradient one gradient row per key;
//   - the dense MLP parameters, one flat vector in the params() layout (the MlpParamSpecs layout
//     of {input_width, hidden..., 1}), loaded and read like a FlatModel's.
//
// A step:
//   keys = TableKeys(batch)                      per table the sorted distinct keys: pull these
//   ComputeGradient(batch, rows, dense_grad, row_grads, &stats)
//                                                gradients of the MEAN loss over the batch
//   (Predict(batch, rows, probabilities) instead, for evaluation)
//
// All arithmetic runs on the borrowed Backend; every span of the public methods is host memory. A
// step moves its inputs in three uploads (dense features, labels and rows in one; the pooling
// matrices in two) and its gradients back in two downloads. Scratch buffers grow to the largest
// batch seen and are then reused.
//
// Thread safety: not thread-safe (one model per training thread, each with its own Backend).
#ifndef PSTRAIN_MODEL_CTR_MODEL_H_
#define PSTRAIN_MODEL_CTR_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/ctr_batch.h"
#include "model/backend.h"
#include "model/ctr_batch_index.h"
#include "model/embedding_bag.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/param_spec.h"
#include "model/relu.h"
#include "model/sigmoid_xent.h"

namespace pstrain {
namespace model {

// How the fields' pooled embeddings meet before the logit.
enum class CtrInteraction {
  kNone,  // the MLP alone
  // DeepFM (Guo et al., 2017): the MLP's logit plus a factorization machine's second-order term,
  // the dot products of every pair of fields' pooled embeddings (Backend::PairwiseDotsForward).
  // It has no parameters of its own, so the tables and the dense layout are the same.
  kFm,
};

// The defaults are Criteo's shape: 26 categorical fields, 13 dense features.
struct CtrModelOptions {
  int num_fields = 26;                         // categorical fields, one table each; >= 0
  int num_dense = 13;                          // dense features per sample; >= 0
  int dim = 16;                                // embedding width of every table; > 0
  std::vector<int> hidden_sizes = {256, 128};  // all > 0; empty: a logistic regression
  BagPooling pooling = BagPooling::kSum;
  CtrInteraction interaction = CtrInteraction::kNone;
  // Table f is named table_prefix + (f + 1): "C1".."C26", as Criteo names its fields.
  std::string table_prefix = "C";
};

// One embedding table: its name (what the servers call it) and row width.
struct TableSpec {
  std::string name;
  int dim = 0;
};

// OK for options a CtrModel can be built with (ranges above, and at least one input feature);
// otherwise INVALID_ARGUMENT naming the bad option.
absl::Status ValidateCtrModelOptions(const CtrModelOptions& options);

// The tables and the dense parameter layout of a model with these options, for roles that lay out
// the servers without building a model:
//   0 fc1.weight {input_width, h1} He    1 fc1.bias {h1} zeros   ...   last: fcK {hK, 1} Glorot
// REQUIRES: ValidateCtrModelOptions(options) is OK.
std::vector<TableSpec> CtrTableSpecs(const CtrModelOptions& options);
std::vector<ParamSpec> CtrDenseParamSpecs(const CtrModelOptions& options);

class CtrModel {
 public:
  // A model for `options` (INVALID_ARGUMENT as ValidateCtrModelOptions) on `backend` (borrowed;
  // must outlive the model). Dense parameters start at zero; call SetParameters or
  // InitializeParameters before training. Errors from the backend's Allocate pass through.
  static absl::StatusOr<std::unique_ptr<CtrModel>> Create(const CtrModelOptions& options, Backend* backend);

  const CtrModelOptions& options() const { return options_; }
  // Table t serves field t.
  const std::vector<TableSpec>& tables() const { return tables_; }
  // The dense parameters.
  const std::vector<ParamSpec>& params() const { return params_; }
  int64_t num_parameters() const { return num_parameters_; }
  // Floats per row of the MLP's input: num_dense + num_fields * dim.
  int input_width() const { return layer_sizes_.front(); }

  // Loads the dense parameters from `flat` (num_parameters() floats, params() layout);
  // INVALID_ARGUMENT for a wrong size.
  absl::Status SetParameters(absl::Span<const float> flat);
  // Copies the dense parameters into `flat`; INVALID_ARGUMENT for a wrong size.
  absl::Status GetParameters(absl::Span<float> flat) const;
  // Sets the dense parameters to their model/init.h values for `seed`. Embedding rows are the
  // servers' to initialize.
  absl::Status InitializeParameters(uint64_t seed);

  // Checks `batch` (see CtrBatchIndex::Index for the INVALID_ARGUMENT cases: field count, dense
  // width, list lengths, labels outside [0, 1], bad offsets) and returns per table its distinct
  // keys, ascending: the rows to pull, in the order ComputeGradient and Predict expect them. The
  // spans point into the model and stay valid until the next TableKeys. The model keeps the index
  // for the ComputeGradient and Predict calls that follow, for this batch, which must stay
  // unchanged and alive until then. On error no batch is indexed.
  absl::StatusOr<std::vector<absl::Span<const uint64_t>>> TableKeys(const data::CtrBatch& batch);

  // Forward and backward pass over the batch of the last TableKeys, with rows[t] the pulled rows
  // of table t (keys(t).size() x dim floats, row k for the k-th key). Writes the gradient of the
  // MEAN loss over the batch: the dense one into dense_grad (num_parameters() floats) and per table
  // one row per key into row_grads[t] (the size of rows[t]; a key repeated in the batch gets the
  // sum of its occurrences). Adds loss sum, correct count (p > 0.5 vs label > 0.5) and samples to
  // *stats (may be null), and with stats->want_predictions each sample's predicted probability
  // (this forward pass's: before the update) and label. An empty batch gives zero gradients.
  // FAILED_PRECONDITION when `batch` is not the one the last TableKeys indexed; INVALID_ARGUMENT
  // for a wrong number or size of row buffers or a wrong dense_grad size (naming the table and the
  // sizes). Backend errors pass through. Outputs are unspecified and *stats unchanged on error.
  absl::Status ComputeGradient(const data::CtrBatch& batch, absl::Span<const absl::Span<const float>> rows,
                               absl::Span<float> dense_grad, absl::Span<const absl::Span<float>> row_grads,
                               BatchStats* stats);

  // Forward only: probabilities[i] = the predicted click probability of sample i (batch.size
  // floats), for AUC and log loss. Errors as ComputeGradient, and INVALID_ARGUMENT for a wrong
  // probabilities size.
  absl::Status Predict(const data::CtrBatch& batch, absl::Span<const absl::Span<const float>> rows,
                       absl::Span<float> probabilities);

 private:
  CtrModel(const CtrModelOptions& options, Backend* backend);

  // FAILED_PRECONDITION / INVALID_ARGUMENT as documented, `method` naming the caller.
  absl::Status CheckRows(const char* method, const data::CtrBatch& batch,
                         absl::Span<const absl::Span<const float>> rows) const;
  // Grows the per-row buffers to n rows.
  absl::Status ReserveRows(int n);
  // Uploads the batch and rows and runs the forward pass to logits(). REQUIRES: CheckRows OK,
  // batch.size > 0.
  absl::Status Forward(const data::CtrBatch& batch, absl::Span<const absl::Span<const float>> rows);
  // Backward from dlogits() into grads_ and row_grads_.
  void Backward(int n);

  const float* weight(int t) const { return weights_.data() + params_[t].flat_offset; }
  float* grad(int t) { return grads_.data() + params_[t].flat_offset; }
  const float* labels() const { return inputs_.data() + labels_at_; }
  const float* logits() const { return acts_.back().data(); }
  float* dlogits() { return delta_[0].data(); }
  bool fm() const { return options_.interaction == CtrInteraction::kFm && options_.num_fields > 1; }

  // Constant after construction.
  const CtrModelOptions options_;
  const std::vector<TableSpec> tables_;
  const std::vector<ParamSpec> params_;
  const int64_t num_parameters_;
  const std::vector<int> layer_sizes_;  // input_width, hidden..., 1
  Backend* const backend_;              // borrowed
  std::vector<Linear> linears_;
  std::vector<Relu> relus_;  // after every Linear but the last
  const EmbeddingBag bag_;
  const SigmoidCrossEntropy loss_;

  // The batch of the last TableKeys.
  CtrBatchIndex index_;

  // The step's layout: inputs_ = [dense (n x num_dense) | labels (n) | table 0's rows | table 1's
  // rows | ...], the rows starting at rows_at_; table t's rows sit at row_at_[t] within them, and
  // its row gradients at row_at_[t] in row_grads_ (num_fields + 1 entries, the last the total).
  int64_t labels_at_ = 0;
  int64_t rows_at_ = 0;
  std::vector<int64_t> row_at_;
  std::vector<float> staging_;  // host copy of inputs_, then of row_grads_

  // Backend memory.
  BackendBuffer<float> weights_;  // num_parameters_, params_ layout
  BackendBuffer<float> grads_;    // num_parameters_, params_ layout
  BackendBuffer<float> inputs_;
  BackendBuffer<float> row_grads_;
  BackendCsrPack matrices_;
  // acts_[0] = the MLP's input rows; acts_[i + 1] = output of layer i (after its ReLU).
  std::vector<BackendBuffer<float>> acts_;
  BackendBuffer<float> delta_[2];    // ping-pong gradients w.r.t. activations, max width per row
  BackendBuffer<float> fm_dlogits_;  // kFm: d(loss)/d(logit), kept through the MLP's backward pass
  int reserved_rows_ = 0;
};

}  // namespace model
}  // namespace pstrain

#endif  // PSTRAIN_MODEL_CTR_MODEL_H_
