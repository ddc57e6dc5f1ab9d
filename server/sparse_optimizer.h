// The optimizers of embedding-table rows, one row at a time.
//
// A sparse row is updated only when a gradient for it arrives, so every piece of optimizer state
// is per element or per row; nothing is global to the table. The state of one row of `dim`
// elements is StateFloatsPerElement(type) vectors of `dim` floats, plus one uint32 step count
// per row for lazy Adam:
//
//   type       state per element      per row   update of w[i] with gradient g = grad[i], rate lr
//   kAdagrad   G                      -         G += g^2;  w -= lr g / (sqrt(G) + eps)
//   kSgd       -                      -         w -= lr g
//   kLazyAdam  m, v                   t         t += 1 (once per row update);
//                                               m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//                                               w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   kFtrl      z, n                   -         FTRL-proximal (McMahan et al. 2013, Algorithm 1)
//                                               with alpha = lr:
//                                               s = (sqrt(n + g^2) - sqrt(n)) / alpha;
//                                               z += g - s w;  n += g^2;
//                                               w = 0 if |z| <= l1, else
//                                               w = -(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)
//
// Lazy Adam is Adam whose moments and bias-correction step belong to the row: a row that is not
// in a push keeps its m, v and t unchanged (TensorFlow's LazyAdam), so rare keys are not decayed
// by every other key's steps. FTRL keeps the weight w materialized next to z and n (as
// TensorFlow's FTRL does) so a pull reads it without recomputing; the first update overwrites an
// initial w != 0 with the value z and n imply, so FTRL tables usually start from zeros. Adagrad's
// G and FTRL's n start at `initial_accumulator`, the others' state at zero.
//
// Thread safety: pure functions over the caller's memory.
#ifndef PSTRAIN_SERVER_SPARSE_OPTIMIZER_H_
#define PSTRAIN_SERVER_SPARSE_OPTIMIZER_H_

#include <cstdint>

#include "absl/status/status.h"

namespace pstrain::server {

struct SparseOptimizerOptions {
  enum class Type { kAdagrad, kSgd, kLazyAdam, kFtrl };
  Type type = Type::kAdagrad;        // Adagrad: the usual choice for sparse rows
  float initial_accumulator = 0.1f;  // kAdagrad (G), kFtrl (n): >= 0, finite
  float epsilon = 1e-8f;             // kAdagrad, kLazyAdam: > 0
  float beta1 = 0.9f;                // kLazyAdam: [0, 1)
  float beta2 = 0.999f;              // kLazyAdam: [0, 1)
  float ftrl_beta = 1.0f;            // kFtrl: >= 0 (McMahan's beta; alpha is the learning rate)
  float l1 = 0.0f;                   // kFtrl: >= 0
  float l2 = 0.0f;                   // kFtrl: >= 0
};

// OK, or INVALID_ARGUMENT naming the field, its value and what was expected.
absl::Status ValidateSparseOptimizer(const SparseOptimizerOptions& options);

// "adagrad", "sgd", "lazy_adam", "ftrl"; "unknown" for a value outside the enum.
const char* SparseOptimizerName(SparseOptimizerOptions::Type type);

// Vectors of `dim` floats of state per row: 1 (Adagrad), 0 (SGD), 2 (lazy Adam, FTRL).
int StateFloatsPerElement(SparseOptimizerOptions::Type type);

// Whether a row carries a uint32 update count (lazy Adam).
bool HasRowStepCount(SparseOptimizerOptions::Type type);

// Sets a new row's state: state[0, StateFloatsPerElement * dim) and *step (when HasRowStepCount;
// may be null otherwise).
void InitRowState(const SparseOptimizerOptions& options, int dim, float* state, uint32_t* step);

// One update of row w[0, dim) with grad[0, dim) at rate lr (see the table above). `state` holds
// the row's state vectors back to back (Adagrad: G; lazy Adam: m then v; FTRL: z then n), `step`
// its update count (lazy Adam; may be null otherwise). REQUIRES: ValidateSparseOptimizer(options)
// is OK, lr > 0, grad does not overlap w or state.
void ApplyRowUpdate(const SparseOptimizerOptions& options, int dim, float lr, const float* grad, float* w, float* state,
                    uint32_t* step);

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_SPARSE_OPTIMIZER_H_
